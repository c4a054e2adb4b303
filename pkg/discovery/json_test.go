package discovery_test

import (
	"encoding/json"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Every list of the contract is present, empty ones as [].
func TestJSONEmptyLists(t *testing.T) {
	for _, n := range []discovery.Node{{}, {RDMADevices: []discovery.RDMADevice{}, Warnings: []string{}}} {
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"rdmaDevices":[],"gpus":[],"affinity":[],"warnings":[]}`; string(b) != want {
			t.Errorf("json = %s, want %s", b, want)
		}
		b, _ = json.Marshal(&n)
		if want := `{"rdmaDevices":[],"gpus":[],"affinity":[],"warnings":[]}`; string(b) != want {
			t.Errorf("json of *Node = %s, want %s", b, want)
		}
	}
}
