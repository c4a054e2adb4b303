package kubectlrdma

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// The probe script runs in a real sh here (the host as the container): lo
// is up ("unknown" for loopback) with 127.0.0.1; the RDMA devices are a
// sysfs tree of the test's own (this kernel has no RDMA), where an unused
// GID entry is a directory, so reading it fails as an unused entry's read
// fails on a real node (EINVAL); an empty one prints nothing either.
func TestContainerScriptRuns(t *testing.T) {
	root := t.TempDir()
	types := filepath.Join(root, "class/infiniband/rxe_p/ports/1/gid_attrs/types")
	for name, content := range map[string]string{"0": "IB/RoCE v1\n", "1": "RoCE v2\n", "3": "RoCE v2\n", "4": ""} {
		if err := os.MkdirAll(types, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(types, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(types, "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "class/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys/class/net/lo", filepath.Join(root, "class/net/lo")); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { probeSysfs = old }(probeSysfs)
	probeSysfs = root

	script := containerScript([]string{"lo", "bad;name"}, []string{"rxe_p", "mlx5_99", "$(x)"})
	if strings.Contains(script, "bad;name") || strings.Contains(script, "$(x)") {
		t.Fatalf("unsafe names in the script:\n%s", script)
	}
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, script)
	}
	v := parseContainerView(string(out))
	if v.memlock == "" || v.hca == "" || v.gidIndex == "" {
		t.Errorf("memlock %q, hca %q, gidindex %q from:\n%s", v.memlock, v.hca, v.gidIndex, out)
	}
	// PID 1's soft limit, from its /proc/1/limits line, in bytes.
	if _, err := strconv.ParseUint(v.mainLock, 10, 64); err != nil && v.mainLock != "unlimited" {
		t.Errorf("memlock of PID 1 %q from:\n%s", v.mainLock, out)
	}
	if st := v.operstate["lo"]; st != "unknown" && st != "up" {
		t.Errorf("lo operstate %q from:\n%s", st, out)
	}
	if _, err := exec.LookPath("ip"); err == nil && !strings.Contains(strings.Join(v.addrs["lo"], ","), "inet 127.0.0.1/8") {
		t.Errorf("lo addresses %q from:\n%s", v.addrs["lo"], out)
	}
	if diff := cmp.Diff(map[string]bool{"rxe_p": true, "mlx5_99": false}, v.rdma); diff != "" {
		t.Errorf("rdma devices seen (-want +got):\n%s\n%s", diff, out)
	}
	want := []gidEntry{{1, 0, "IB/RoCE v1"}, {1, 1, "RoCE v2"}, {1, 3, "RoCE v2"}}
	if diff := cmp.Diff(want, v.gids["rxe_p"], cmp.AllowUnexported(gidEntry{})); diff != "" {
		t.Errorf("rxe_p GIDs (-want +got):\n%s\n%s", diff, out)
	}
}

// A node that cannot be opened read-write: the shell's reason reaches the
// view. A directory fails for root too (EISDIR); device nodes with nothing
// behind them, which this machine cannot make openable, fail the same way
// with ENXIO.
func TestContainerScriptOpenError(t *testing.T) {
	dir := t.TempDir()
	script := strings.ReplaceAll(containerScript(nil, nil), "/dev/infiniband/uverbs*", "/dev/null "+dir)
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	v := parseContainerView(string(out))
	if len(v.devOK) != 1 || v.devOK[0] != "/dev/null" {
		t.Errorf("devOK %q from:\n%s", v.devOK, out)
	}
	if got := v.devErr[dir]; !strings.Contains(strings.ToLower(got), "is a directory") || strings.Contains(got, dir) {
		t.Errorf("open error %q, want the reason alone, from:\n%s", got, out)
	}
}

func TestParseContainerView(t *testing.T) {
	v := parseContainerView("dev /dev/infiniband/uverbs0 ok\ndev /dev/infiniband/uverbs3 err No such device or address\nmemlock 8192\nhca <unset>\n" +
		"gidindex 3\nnoip\nnetdev net1 down\naddr net1 inet6 fe80::1/64\nrdma mlx5_3 present\nrdma mlx5_4 missing\ngid mlx5_3 1 3 RoCE v2\ngarbage\n")
	want := containerView{devOK: []string{"uverbs0"}, devErr: map[string]string{"uverbs3": "No such device or address"}, memlock: "8192",
		hca: "<unset>", gidIndex: "3", noIP: true, operstate: map[string]string{"net1": "down"},
		addrs: map[string][]string{"net1": {"inet6 fe80::1/64"}}, rdma: map[string]bool{"mlx5_3": true, "mlx5_4": false},
		gids: map[string][]gidEntry{"mlx5_3": {{1, 3, "RoCE v2"}}}}
	if diff := cmp.Diff(want, v, cmp.AllowUnexported(containerView{}, gidEntry{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestOpenFix(t *testing.T) {
	for msg, want := range map[string]string{
		"Operation not permitted":   "device cgroup",
		"Permission denied":         "mode",
		"No such device or address": "no driver",
		"No such device":            "no driver",
		"Input/output error":        "dmesg",
	} {
		if got := openFix(msg); !strings.Contains(got, want) {
			t.Errorf("openFix(%q) = %q, want it to mention %q", msg, got, want)
		}
	}
}

// The fix for a device the container does not see depends on the node's
// RDMA netns mode, and names both causes when the mode is unknown.
func TestGIDCheckFixByMode(t *testing.T) {
	a := containerAlloc{devices: []v1alpha1.Device{{Name: "mlx5_3", LinkLayer: "Ethernet"}}}
	v := parseContainerView("rdma mlx5_3 missing\n")
	for mode, want := range map[string][]string{
		"exclusive": {"moved to"},
		"shared":    {"kernel has no mlx5_3"},
		"unknown":   {"mode is unknown", "moved to", "kernel has no mlx5_3"},
		"":          {"not in its state", "moved to", "kernel has no mlx5_3"},
	} {
		c := gidCheck(v, a, mode)
		for _, w := range want {
			if c.Verdict != Fail || !strings.Contains(c.Fix, w) {
				t.Errorf("mode %q: %s %q, want fail mentioning %q", mode, c.Verdict, c.Fix, w)
			}
		}
	}
	v = parseContainerView("rdma mlx5_3 present\ngid mlx5_3 1 0 IB/RoCE v1\n")
	if c := gidCheck(v, a, "shared"); c.Verdict != Fail || !strings.Contains(c.Detail, "no RoCE v2 GID") {
		t.Errorf("no RoCE v2 GID: %+v", c)
	}
}

// TestMemlockCheck: the exec'd shell's limit and the container's first
// process's (what the memlock hook raises) give the verdict.
func TestMemlockCheck(t *testing.T) {
	for _, tc := range []struct {
		exec, main string
		verdict    Verdict
		detail     string
	}{
		{"unlimited", "unlimited", Pass, "unlimited"},
		{"unlimited", "", Pass, "unlimited"},
		{"8192", "unlimited", Pass, "unlimited for the container's processes; 8192 KiB for processes started with kubectl exec"},
		{"8192", "8388608", Warn, "locked memory limited to 8192 KiB"},
		{"8192", "", Warn, "locked memory limited to 8192 KiB"},
		{"8192", "68719476736", Warn, "locked memory limited to 8192 KiB (67108864 KiB for the container's first process)"},
		// A shared process namespace: PID 1 is the sandbox's, the shell's is what counts.
		{"unlimited", "8388608", Pass, "unlimited"},
	} {
		c := memlockCheck(containerView{memlock: tc.exec, mainLock: tc.main})
		if c.Verdict != tc.verdict || !strings.HasPrefix(c.Detail, tc.detail) || (c.Verdict == Warn) != (c.Fix != "") {
			t.Errorf("exec %s, main %s: %v %q (fix %q); want %v %q...", tc.exec, tc.main, c.Verdict, c.Detail, c.Fix, tc.verdict, tc.detail)
		}
	}
}
