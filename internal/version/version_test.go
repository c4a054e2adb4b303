package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGet(t *testing.T) {
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-23T15:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	gov := runtime.Version()
	tests := []struct {
		name               string
		version, commit, d string
		read               func() (*debug.BuildInfo, bool)
		want               Info
	}{
		{"linked in", "v0.3.0-2-gabc", "abc", "2026-11-23T16:00:00Z", stamped,
			Info{"v0.3.0-2-gabc", "abc", "2026-11-23T16:00:00Z", gov}},
		{"vcs stamp", "", "", "", stamped,
			Info{"0123456789ab-dirty", "0123456789abcdef0123456789abcdef01234567", "2026-11-23T15:00:00Z", gov}},
		{"nothing", "", "", "", none, Info{"unknown", "unknown", "unknown", gov}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, get(tt.version, tt.commit, tt.d, tt.read)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
