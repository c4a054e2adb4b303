package helm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUpdateStrategy: an update starts the new pod beside the old one on each node (maxSurge
// 1, maxUnavailable 0: docs/device-plugin.md "Updates"; the old pod stops once the new one is
// ready by its own probe, TestProbes), and the daemon gets its pod's UID for the DRA front
// end's rolling update, with DRA off or on.
func TestUpdateStrategy(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"dra", []string{"--set", "dra.enabled=true", "--set-json", draPools}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := daemonSet(t, render(t, tc.args...))
			u := ds.UpdateStrategy
			if u.Type != "RollingUpdate" || u.RollingUpdate == nil {
				t.Fatalf("updateStrategy %+v, want RollingUpdate", u)
			}
			got := map[string]any{"maxSurge": u.RollingUpdate.MaxSurge, "maxUnavailable": u.RollingUpdate.MaxUnavailable}
			if diff := cmp.Diff(map[string]any{"maxSurge": float64(1), "maxUnavailable": float64(0)}, got); diff != "" {
				t.Errorf("rollingUpdate (-want +got):\n%s", diff)
			}
			want := map[string]string{"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid"}
			for _, c := range ds.Template.Spec.Containers {
				if c.Name != "device-plugin" {
					continue
				}
				fields := map[string]string{}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
						fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
					}
				}
				if diff := cmp.Diff(want, fields); diff != "" {
					t.Errorf("device-plugin env from fields (-want +got):\n%s", diff)
				}
				return
			}
			t.Fatal("no device-plugin container")
		})
	}
}
