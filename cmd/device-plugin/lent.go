package main

import (
	"fmt"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// lentDevices is the agent's LentDevices over the CNI plugin's records of
// this boot (--cni-state-dir, read only): the devices in pods' network
// namespaces, which the daemon keeps in their pools while it cannot see
// them (docs/cni.md, "Exclusive RDMA netns mode").
type lentDevices struct {
	store attachment.Store
}

func (l lentDevices) LentDevices() (map[string]bool, error) {
	recs, err := l.store.Records()
	if err != nil {
		return nil, fmt.Errorf("read cni attachment records: %w", err)
	}
	return attachment.Lent(recs), nil
}
