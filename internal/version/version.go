// Package version says which build of kube-rdma is running. The Makefile
// sets Version, Commit and Date with -ldflags -X; a plain `go build` leaves
// them empty and Get falls back to the VCS stamp the Go toolchain records.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time: -X github.com/kube-rdma/kube-rdma/internal/version.Version=...
var (
	Version string // `git describe --tags --always --dirty`
	Commit  string // full commit hash
	Date    string // build date, UTC, RFC 3339
)

// Info is one build's identity.
type Info struct {
	Version, Commit, Date, GoVersion string
}

// Get returns the linked-in values, completed from the build info.
func Get() Info {
	return get(Version, Commit, Date, debug.ReadBuildInfo)
}

func get(v, commit, date string, read func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: v, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		if i.Version == "" && i.Commit != "" {
			i.Version = short(i.Commit)
			if modified {
				i.Version += "-dirty"
			}
		}
	}
	for _, s := range []*string{&i.Version, &i.Commit, &i.Date} {
		if *s == "" {
			*s = "unknown"
		}
	}
	return i
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// String is the line `<binary> --version` prints after the binary's name.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.GoVersion)
}
