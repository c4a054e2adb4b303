package kubectlrdma

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The probe script runs in a real sh here (the host as the container): lo
// is up ("unknown" for loopback) with 127.0.0.1, and a device that is not
// there reads as missing.
func TestContainerScriptRuns(t *testing.T) {
	script := containerScript([]string{"lo", "bad;name"}, []gidProbe{{dev: "mlx5_99", port: 1, idx: 3}, {dev: "$(x)", port: 1, idx: 0}})
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
	if st := v.operstate["lo"]; st != "unknown" && st != "up" {
		t.Errorf("lo operstate %q from:\n%s", st, out)
	}
	if _, err := exec.LookPath("ip"); err == nil && !strings.Contains(strings.Join(v.addrs["lo"], ","), "inet 127.0.0.1/8") {
		t.Errorf("lo addresses %q from:\n%s", v.addrs["lo"], out)
	}
	if v.gidType["mlx5_99"] != "missing" {
		t.Errorf("gid of a missing device %q", v.gidType["mlx5_99"])
	}
}

func TestParseContainerView(t *testing.T) {
	v := parseContainerView("dev /dev/infiniband/uverbs0 ok\ndev /dev/infiniband/uverbs3 denied\nmemlock 8192\nhca <unset>\n" +
		"gidindex 3\nnoip\nnetdev net1 down\naddr net1 inet6 fe80::1/64\ngid mlx5_3 3 RoCE v2\ngarbage\n")
	want := containerView{devOK: []string{"uverbs0"}, devDenied: []string{"uverbs3"}, memlock: "8192", hca: "<unset>", gidIndex: "3",
		noIP: true, operstate: map[string]string{"net1": "down"}, addrs: map[string][]string{"net1": {"inet6 fe80::1/64"}},
		gidType: map[string]string{"mlx5_3": "RoCE v2"}}
	if diff := cmp.Diff(want, v, cmp.AllowUnexported(containerView{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
