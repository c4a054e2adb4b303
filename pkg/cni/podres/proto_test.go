package podres

import (
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
		decodePods(b)
	})
}
