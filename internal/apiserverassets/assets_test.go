package apiserverassets

import (
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"
)

type fileInfo struct{ name string }

func (f fileInfo) Name() string       { return f.name }
func (f fileInfo) Size() int64        { return 0 }
func (f fileInfo) Mode() fs.FileMode  { return 0o755 }
func (f fileInfo) ModTime() time.Time { return time.Time{} }
func (f fileInfo) IsDir() bool        { return false }
func (f fileInfo) Sys() any           { return nil }

// TestFind: the off switch skips; KUBEBUILDER_ASSETS without the binaries fails, with them is
// used; unset (or empty), the default is used when it has them and skipped when not.
func TestFind(t *testing.T) {
	both := map[string]bool{"/a/kube-apiserver": true, "/a/etcd": true, Default + "/kube-apiserver": true, Default + "/etcd": true}
	onlyAPI := map[string]bool{"/a/kube-apiserver": true, Default + "/kube-apiserver": true}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		files   map[string]bool
		wantDir string
		skip    bool
		fail    string // substring of the message when it ends the test
	}{
		{"off", map[string]string{OffEnv: "off", "KUBEBUILDER_ASSETS": "/a"}, both, "", true, OffEnv + "=off"},
		{"set, both", map[string]string{"KUBEBUILDER_ASSETS": "/a"}, both, "/a", false, ""},
		{"set, no etcd", map[string]string{"KUBEBUILDER_ASSETS": "/a"}, onlyAPI, "", false, "KUBEBUILDER_ASSETS=/a has no etcd"},
		{"unset, default has both", nil, both, Default, false, ""},
		{"empty, default has both", map[string]string{"KUBEBUILDER_ASSETS": ""}, both, Default, false, ""},
		{"unset, default lacks etcd", nil, onlyAPI, "", true, "no etcd in " + Default},
		{"other value of the switch", map[string]string{OffEnv: "on"}, both, Default, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			stat := func(p string) (os.FileInfo, error) {
				if tc.files[p] {
					return fileInfo{p}, nil
				}
				return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
			}
			dir, err := find(lookup, stat)
			if tc.fail == "" {
				if err != nil || dir != tc.wantDir {
					t.Fatalf("find = %q, %+v; want %q", dir, err, tc.wantDir)
				}
				return
			}
			if err == nil || err.skip != tc.skip || !strings.Contains(err.msg, tc.fail) {
				t.Fatalf("find = %q, %+v; want skip=%v with %q", dir, err, tc.skip, tc.fail)
			}
		})
	}
}
