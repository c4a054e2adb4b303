package dra_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// TestRollingUpdateSockets: with PodUID the old and the new pod of a
// DaemonSet update run side by side on one plugin and one registration
// directory, each on sockets named after its pod, and the old one's stop
// leaves the new one's; without it there is one set of sockets. Nothing
// here calls the API server.
func TestRollingUpdateSockets(t *testing.T) {
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "dra") // socket paths: 108 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	plugin, registry := filepath.Join(dir, "plugin"), filepath.Join(dir, "registry")
	if err := os.Mkdir(registry, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(uid types.UID) *dra.Driver {
		d, err := dra.StartDriver(context.Background(), dra.DriverConfig{NodeName: "node-a", KubeClient: kube,
			PluginDir: plugin, RegistryDir: registry, CDIDir: t.TempDir(), PodUID: uid})
		if err != nil {
			t.Fatalf("start driver of pod %q: %v", uid, err)
		}
		return d
	}
	check := func(when string, want []string) {
		t.Helper()
		var got []string
		for _, d := range []string{plugin, registry} {
			matches, _ := filepath.Glob(filepath.Join(d, "*.sock"))
			for _, m := range matches {
				got = append(got, filepath.Join(filepath.Base(d), filepath.Base(m)))
			}
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("sockets %s (-want +got):\n%s", when, diff)
		}
	}

	old := start("uid-old")
	next := start("uid-new")
	check("with both pods", []string{"plugin/dra-uid-new.sock", "plugin/dra-uid-old.sock",
		"registry/" + dra.DriverName + "-uid-new-reg.sock", "registry/" + dra.DriverName + "-uid-old-reg.sock"})
	old.Stop()
	check("after the old pod stopped", []string{"plugin/dra-uid-new.sock", "registry/" + dra.DriverName + "-uid-new-reg.sock"})
	next.Stop()

	single := start("")
	check("without a pod UID", []string{"plugin/dra.sock", "registry/" + dra.DriverName + "-reg.sock"})
	single.Stop()
}
