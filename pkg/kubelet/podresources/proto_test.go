package podresources

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestEncodeGetRequest(t *testing.T) {
	b := encodeGetRequest("p", "ns")
	want := []byte{0x0a, 1, 'p', 0x12, 2, 'n', 's'}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("encodeGetRequest (-want +got):\n%s", diff)
	}
}

// FuzzDecodePods checks that the response decoder never panics on what a
// kubelet (or anything on its socket) sends.
func FuzzDecodePods(f *testing.F) {
	dev := protowire.AppendTag(nil, devResourceName, protowire.BytesType)
	dev = protowire.AppendString(dev, "rdma/hca")
	dev = protowire.AppendTag(dev, devDeviceIDs, protowire.BytesType)
	dev = protowire.AppendString(dev, "mlx5_0")
	ctr := protowire.AppendTag(nil, ctrDevices, protowire.BytesType)
	ctr = protowire.AppendBytes(ctr, dev)
	pod := protowire.AppendTag(nil, podName, protowire.BytesType)
	pod = protowire.AppendString(pod, "p")
	pod = protowire.AppendTag(pod, podContainers, protowire.BytesType)
	pod = protowire.AppendBytes(pod, ctr)
	resp := protowire.AppendTag(nil, respPodResources, protowire.BytesType)
	resp = protowire.AppendBytes(resp, pod)
	f.Add(resp)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodePods(b) // fuzzing for panics: any result will do
	})
}

// TestWireMatchesProtowire: the hand-written wire code reads and writes
// what google.golang.org/protobuf's does (linked only into this test).
func TestWireMatchesProtowire(t *testing.T) {
	want := protowire.AppendTag(nil, getReqPodName, protowire.BytesType)
	want = protowire.AppendString(want, "pod")
	want = protowire.AppendTag(want, getReqPodNamespace, protowire.BytesType)
	want = protowire.AppendString(want, strings.Repeat("n", 300)) // two-byte length
	if got := encodeGetRequest("pod", strings.Repeat("n", 300)); !bytes.Equal(got, want) {
		t.Errorf("encodeGetRequest = %x, want %x", got, want)
	}

	var msg []byte
	msg = protowire.AppendTag(msg, 7, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 1<<63)
	msg = protowire.AppendTag(msg, 8, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 5)
	msg = protowire.AppendTag(msg, 1<<20, protowire.Fixed64Type)
	msg = protowire.AppendFixed64(msg, 6)
	msg = protowire.AppendTag(msg, 3, protowire.BytesType)
	msg = protowire.AppendString(msg, "v")
	var got []string
	if err := fields(msg, func(num number, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%s", num, v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "3=v" {
		t.Errorf("fields = %q, want [3=v]", got)
	}
	// A message cut inside a field is an error, between fields it is not.
	whole := map[int]bool{0: true, 11: true, 16: true, 28: true, len(msg): true}
	for i := range len(msg) + 1 {
		err := fields(msg[:i], func(number, []byte) error { return nil })
		if (err == nil) != whole[i] {
			t.Errorf("prefix of %d bytes: err = %v", i, err)
		}
	}
	group := protowire.AppendTag(nil, 2, protowire.StartGroupType)
	if err := fields(group, func(number, []byte) error { return nil }); err == nil {
		t.Error("a group parsed")
	}
	trunc := protowire.AppendTag(nil, 2, protowire.BytesType)
	trunc = protowire.AppendVarint(trunc, 5)
	if err := fields(append(trunc, 'x'), func(number, []byte) error { return nil }); err == nil {
		t.Error("a truncated field parsed")
	}
}
