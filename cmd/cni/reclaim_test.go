package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

func TestReclaimUsage(t *testing.T) {
	for _, args := range [][]string{
		{"reclaim"},
		{"reclaim", "c1"},
		{"reclaim", "/eth0"},
		{"reclaim", "c1/"},
		{"reclaim", "c1/eth0/x"},
		{"reclaim", "--return-wait", "-1s", "c1/eth0"},
	} {
		var out, errOut bytes.Buffer
		if err := command(args, &out, &errOut); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}

// TestReclaimCommand: `kube-rdma reclaim` (what the node agent's reclaimer
// runs from the CNI bin directory) restores the attachment of a pod whose
// netns is gone and removes its record, says why it skipped a key without
// a record, and prints one JSON line per key in the order given. The
// record's device was already returned and it names no IPAM, so no link of
// the test's netns changes (pkg/cni's tests move real ones).
func TestReclaimCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reclaim takes the host's netlink handles and the plugin's lock as the daemon does: needs root (CAP_NET_ADMIN)")
	}
	store := attachment.Store{Dir: t.TempDir(), BootID: "boot-1"}
	key := attachment.Key{ContainerID: "c1", IfName: "eth0"}
	rec := attachment.Attachment{Key: key, Netns: filepath.Join(t.TempDir(), "cni-gone"), Network: "rdma", Complete: true,
		Pod:     &attachment.PodRef{Namespace: "ns", Name: "p1"},
		Devices: []attachment.Device{{RDMA: "mlx5_0", Host: attachment.HostLink{Name: "nic0"}, PodIfName: "net1", Returned: true}}}
	if err := store.Save(rec); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := command([]string{"reclaim", "--state-dir", store.Dir, "--boot-id", "boot-1", "--cni-path", t.TempDir(),
		"--sysfs-root", t.TempDir(), "c1/eth0", "c2/net1"}, &out, &errOut)
	if err != nil {
		t.Fatalf("reclaim: %v\n%s", err, errOut.String())
	}
	var got []reclaimResult
	for l := range strings.Lines(out.String()) {
		var r reclaimResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[1].Skipped == "" {
		t.Fatalf("output %q: want two lines, the second skipped", out.String())
	}
	got[1].Skipped = "(why)"
	want := []reclaimResult{
		{ContainerID: "c1", IfName: "eth0", Pod: &attachment.PodRef{Namespace: "ns", Name: "p1"}},
		{ContainerID: "c2", IfName: "net1", Skipped: "(why)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if _, err := store.Load(key); err == nil {
		t.Error("the record is still there")
	}
}
