package nri

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// ErrNetdevMissing is CreateContainer's refusal of a container that holds
// devices of a pool whose pods get netdevs when its pod sandbox has no
// complete attachment of them (--nri-fail-closed; docs/device-plugin.md,
// "Fail closed").
var ErrNetdevMissing = errors.New("pod has no netdevs of its rdma devices")

// RecordLister lists the CNI plugin's attachment records
// (attachment.Store.Records).
type RecordLister interface {
	Records() ([]attachment.Attachment, error)
}

// Holdings are the devices of each pool the container holds: the RDMA
// names behind its device nodes, and for a CDI device that names no node
// the container has, the CDI name itself.
func Holdings(ctr Container, devs Devices) []netdevcheck.Holding {
	var out []netdevcheck.Holding
	for _, p := range devs.Pools {
		var names []string
		for _, n := range p.Nodes {
			if n.Device != "" && !slices.Contains(names, n.Device) && hasNode(ctr, []DeviceNode{n}) {
				names = append(names, n.Device)
			}
		}
		if len(names) == 0 {
			for _, c := range p.CDIDevices {
				if hasCDI(ctr, []string{c}) {
					names = append(names, c[strings.LastIndex(c, "=")+1:])
				}
			}
		}
		if len(names) > 0 {
			out = append(out, netdevcheck.Holding{Pool: p.Name, Devices: names})
		}
	}
	return out
}

// refusal returns why the container must not be created, or nil: it holds
// devices of a netdev pool and its sandbox has no complete attachment of
// them. Records that cannot be read refuse too: failing closed. A
// hostNetwork pod is let through: no CNI ADD runs for it, it can get no
// netdev.
func refusal(pod Pod, ctr Container, devs Devices, records RecordLister) error {
	if pod.HostNetwork {
		return nil
	}
	held := Holdings(ctr, devs)
	netdev := false
	for _, h := range held {
		_, ok := devs.Netdev[h.Pool]
		netdev = netdev || ok
	}
	if !netdev {
		return nil
	}
	p := netdevcheck.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, SandboxID: pod.ID}
	var recs []attachment.Attachment
	if records != nil {
		var err error
		if recs, err = records.Records(); err != nil {
			return fmt.Errorf("%w: kube-rdma: pod %s holds rdma devices of a pool whose pods get netdevs, and the CNI plugin's records cannot be read: %w", ErrNetdevMissing, p, err)
		}
	}
	miss := netdevcheck.Check(p, held, devs.Netdev, recs)
	if len(miss) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(miss))
	for _, m := range miss {
		msgs = append(msgs, netdevcheck.Message(p, m))
	}
	return fmt.Errorf("%w: %s", ErrNetdevMissing, strings.Join(msgs, "; "))
}
