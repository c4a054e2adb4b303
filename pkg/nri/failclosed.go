package nri

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
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
	return check(netdevcheck.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, SandboxID: pod.ID}, held, devs.Netdev, records)
}

// check returns the refusal of a pod that holds held when its sandbox has
// no complete attachment of them, or nil.
func check(p netdevcheck.Pod, held []netdevcheck.Holding, netdev map[string]netdevcheck.Why, records RecordLister) error {
	var recs []attachment.Attachment
	if records != nil {
		var err error
		if recs, err = records.Records(); err != nil {
			return fmt.Errorf("%w: kube-rdma: pod %s holds rdma devices of a pool whose pods get netdevs, and the CNI plugin's records cannot be read: %w", ErrNetdevMissing, p, err)
		}
	}
	miss := netdevcheck.Check(p, held, netdev, recs)
	if len(miss) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(miss))
	for _, m := range miss {
		msgs = append(msgs, netdevcheck.Message(p, m))
	}
	return fmt.Errorf("%w: %s", ErrNetdevMissing, strings.Join(msgs, "; "))
}

// ClaimLister lists the DRA front end's claim records (claimrecord.ReadAll
// of its claims directory; a directory not there yet is no record).
type ClaimLister interface {
	Claims() ([]claimrecord.Record, error)
}

// claimRefusal is refusal for the chained pool of frontend dra, whose
// devices are in no pool of the view: the pod's holdings are its prepared
// claims' devices of that pool (netdevcheck.ClaimHoldings), and a
// container is refused when it is a container of those claims (it has a
// node of one of their devices, or a CDI device of kind
// claimrecord.CDIKind) and the sandbox has no complete attachment of every
// one. Claim records that cannot be read refuse a container with a claim's
// CDI device: failing closed.
func claimRefusal(pod Pod, ctr Container, devs Devices, claims ClaimLister, records RecordLister) error {
	if pod.HostNetwork || claims == nil || !slices.ContainsFunc(slices.Collect(maps.Values(devs.Netdev)), netdevcheck.Why.DRA) {
		return nil
	}
	p := netdevcheck.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, SandboxID: pod.ID}
	recs, err := claims.Claims()
	if err != nil {
		if hasClaimCDI(ctr) {
			return fmt.Errorf("%w: kube-rdma: pod %s has a claim of DRA driver %s, and the claim records cannot be read: %w", ErrNetdevMissing, p, claimrecord.DriverName, err)
		}
		return nil
	}
	held := netdevcheck.ClaimHoldings(pod.UID, recs, devs.Netdev, devs.Names)
	if len(held) == 0 || !ofClaims(ctr, held, devs, claimUIDs(pod.UID, recs, devs.Netdev)) {
		return nil
	}
	return check(p, held, devs.Netdev, records)
}

// claimUIDs are the UIDs of the pod's claims with devices of DRA chained
// pools that get netdevs.
func claimUIDs(podUID string, recs []claimrecord.Record, netdev map[string]netdevcheck.Why) []string {
	var out []string
	for _, r := range recs {
		if len(netdevcheck.ClaimHoldings(podUID, []claimrecord.Record{r}, netdev, nil)) > 0 {
			out = append(out, r.UID)
		}
	}
	return out
}

// ofClaims reports whether the container got devices of the claims: a node
// of one, or a CDI device of one of the claims (named
// "<CDIKind>=<claim UID>-<request>", pkg/dra).
func ofClaims(ctr Container, held []netdevcheck.Holding, devs Devices, uids []string) bool {
	for _, h := range held {
		for _, d := range h.Devices {
			if hasNode(ctr, devs.Nodes[d]) {
				return true
			}
		}
	}
	return hasClaimCDI(ctr, uids...)
}

// hasClaimCDI reports whether the container has a CDI device of a claim,
// of one of uids when any are given (CDI devices of the request, or the
// cdi.k8s.io/ annotations older runtimes read).
func hasClaimCDI(ctr Container, uids ...string) bool {
	claim := func(n string) bool {
		rest, ok := strings.CutPrefix(strings.TrimSpace(n), claimrecord.CDIKind+"=")
		return ok && (len(uids) == 0 || slices.ContainsFunc(uids, func(u string) bool { return strings.HasPrefix(rest, u+"-") }))
	}
	if slices.ContainsFunc(ctr.CDIDevices, claim) {
		return true
	}
	for k, v := range ctr.Annotations {
		if strings.HasPrefix(k, cdiAnnotationPrefix) && slices.ContainsFunc(strings.Split(v, ","), claim) {
			return true
		}
	}
	return false
}
