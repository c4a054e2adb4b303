package dra

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

// CDIKind is the CDI kind of the claims' devices. Each claim gets its own
// spec file and device names that start with the claim's UID, so a
// runtime's cached spec is never mistaken for a later claim's.
const CDIKind = claimrecord.CDIKind

// Errors of Prepare. The kubelet retries a claim that failed.
var (
	// ErrUnknownDevice: the allocation names a device this node does not
	// publish (any more).
	ErrUnknownDevice = errors.New("unknown device")
	// ErrInUse: the allocation names a device another prepared claim
	// holds alone, or holds alone a device another claim holds.
	ErrInUse = errors.New("device in use by another claim")
)

// Lookup finds the RDMA device behind a published device.
type Lookup interface {
	Device(pool, device string) (discovery.RDMADevice, bool)
	// NCCL reports whether the pool sets NCCL's variables.
	NCCL(pool string) bool
	// Memlock is the pool's locked-memory limit for the memlock hook; 0
	// names no hook.
	Memlock(pool string) uint64
}

// Claim is what Prepare needs of a ResourceClaim: its identity, the pods
// it is reserved for and the allocation results of our driver, in the
// claim's order.
type Claim struct {
	UID, Namespace, Name string
	// PodUIDs are the UIDs of status.reservedFor's pods. The record keeps
	// them, sorted, for the CNI plugin, which finds a pod's devices by them.
	PodUIDs []string
	Results []Result
}

// Result is one allocated device.
type Result struct {
	// Request is the request (or "request/subrequest") it was allocated for.
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// AdminAccess: allocated for monitoring or maintenance alongside the
	// claim that uses the device; it neither holds the device nor is
	// refused for it.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// ShareID is the allocation's share of a device of a shared pool
	// (allocation result shareID): the claims with one each hold the
	// device together.
	ShareID string `json:"shareID,omitempty"`
}

// Prepared is one allocated device and the CDI devices a container that
// uses its request gets. Each request's CDI device comes with the first
// device of the request only: it already holds all of them, and the
// runtime would apply a repeated device twice.
type Prepared struct {
	Request, Pool, Device string
	CDIDeviceIDs          []string
}

// Preparer prepares and unprepares claims. It keeps a record per prepared
// claim in StateDir (package claimrecord), so Unprepare works after a
// restart, Prepare can refuse a device another claim holds, and the CNI
// plugin can move the claimed NICs' netdevs into the pods. Prepare and
// Unprepare may be called from several goroutines.
type Preparer struct {
	// CDIDir is where the claims' CDI specs go (/var/run/cdi).
	CDIDir string
	// StateDir keeps the records; it must survive a restart of the daemon
	// (not a reboot: the kubelet prepares again after one).
	StateDir string
	// DevRoot is where this process sees the host's /dev (is rdma_cm there?).
	DevRoot string
	Devices Lookup
	// MemlockHook is the host path of the memlock hook binary; the claim's
	// spec runs it with the highest memlock of its devices' pools. "" names
	// no hook.
	MemlockHook string
	// FailClosed, with MemlockHook, puts the same binary's netdev hook on
	// each CDI device of a request with devices of the chained pool
	// (pkg/memlockhook, NetdevCommand): the runtime refuses a container of
	// the claim's pods whose sandbox has no attachment of them, whether or
	// not the NRI plugin is connected. nil puts none.
	FailClosed *FailClosed
	// Log gets the records that did not decode and were moved aside
	// (claimrecord.Damaged), once each, and the records written again from
	// memory; nil discards.
	Log *slog.Logger

	mu sync.Mutex
	// known is every record this process wrote or read, by claim UID, until
	// its Unprepare: what records writes again when the file is gone while
	// the claim's CDI spec is there (a torn record moved aside by whichever
	// reader met it first). The kubelet prepares a claim once, so without
	// this a running pod's claim would stay without its record, its devices
	// out of the in-use check and out of reach of the CNI plugin, for the
	// pod's lifetime.
	known map[string]claimrecord.Record
}

// FailClosed is what the netdev hook of a claim's CDI devices checks
// (Preparer.FailClosed).
type FailClosed struct {
	// StateDir is the CNI plugin's attachment records as the host sees
	// them; "" when the plugin is not installed.
	StateDir string
	// Pool is the chained CNI entry's pool (a configured pool's name);
	// SharedNetdev: the entry gives a shared pool's pods child netdevs, so
	// a claim's share of a device gets one too.
	Pool         string
	SharedNetdev bool
}

// netdevDevice reports whether the result's device gets a netdev from the
// chained entry for the claim's pods (claimrecord.Device.GetsNetdev).
func (f *FailClosed) netdevDevice(r Result) bool {
	d := claimrecord.Device{Pool: r.Pool, AdminAccess: r.AdminAccess, ShareID: r.ShareID}
	return f != nil && f.Pool != "" && d.OfPool(f.Pool) && d.GetsNetdev(f.SharedNetdev)
}

// Prepare writes the claim's CDI spec (one CDI device per request, with
// the device nodes of that request's NICs) and returns the CDI devices.
// NCCL's variables are computed once over the NICs of the claim's NCCL
// pools (Lookup.NCCL), whichever requests hold them, and each request with
// such a NIC carries the same values: the runtime keeps one value per
// variable of a container's CDI devices, so per-request values would name
// one request's NICs in a container that uses several. A request with no
// NCCL NIC carries none. Preparing a prepared claim again gives the same
// answer and rewrites nothing that did not change.
func (p *Preparer) Prepare(c Claim) ([]Prepared, error) {
	if err := claimrecord.CheckUID(c.UID); err != nil {
		return nil, fmt.Errorf("prepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Plan: resolve every device and check it is free.
	held, err := p.held(c.UID)
	if err != nil {
		return nil, fmt.Errorf("prepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	var requests []string
	var memlock uint64
	byRequest := map[string][]discovery.RDMADevice{}
	var ncclDevs []discovery.RDMADevice
	ncclRequest := map[string]bool{}
	netdevs := map[string][]string{} // per request, the netdev hook's devices
	var fc *FailClosed
	if p.MemlockHook != "" {
		fc = p.FailClosed
	}
	rec := claimrecord.Record{UID: c.UID, Namespace: c.Namespace, Name: c.Name, PodUIDs: podUIDs(c.PodUIDs),
		Devices: make([]claimrecord.Device, 0, len(c.Results))}
	for _, r := range c.Results {
		d, ok := p.Devices.Device(r.Pool, r.Device)
		if !ok {
			return nil, fmt.Errorf("prepare claim %s/%s: %w: %s in pool %s", c.Namespace, c.Name, ErrUnknownDevice, r.Device, r.Pool)
		}
		if other, ok := held[poolDevice{r.Pool, r.Device}]; ok && !r.AdminAccess && !(other.shared && r.ShareID != "") {
			return nil, fmt.Errorf("prepare claim %s/%s: %w: %s in pool %s is claim %s's", c.Namespace, c.Name, ErrInUse, r.Device, r.Pool, other.claim)
		}
		if _, ok := byRequest[r.Request]; !ok {
			requests = append(requests, r.Request)
		}
		byRequest[r.Request] = append(byRequest[r.Request], d)
		memlock = max(memlock, p.Devices.Memlock(r.Pool))
		if p.Devices.NCCL(r.Pool) && !slices.ContainsFunc(ncclDevs, func(x discovery.RDMADevice) bool { return x.Name == d.Name }) {
			ncclDevs = append(ncclDevs, d)
			ncclRequest[r.Request] = true
		}
		if fc.netdevDevice(r) {
			id := d.Name
			if fn := attachment.FunctionID(d.PCIAddress, d.AuxDevice); fn != "" {
				id += "@" + fn
			}
			if !slices.Contains(netdevs[r.Request], id) {
				netdevs[r.Request] = append(netdevs[r.Request], id)
			}
		}
		rec.Devices = append(rec.Devices, claimrecord.Device{Request: r.Request, Pool: r.Pool, Device: r.Device,
			AdminAccess: r.AdminAccess, RDMA: d.Name, PCIAddress: d.PCIAddress, AuxDevice: d.AuxDevice, ShareID: r.ShareID})
	}
	spec := cdispec.Spec{Kind: CDIKind, Devices: []cdispec.Device{}}
	if containeredits.Present(p.DevRoot, containeredits.RDMACM) {
		spec.ContainerEdits.DeviceNodes = containeredits.CDIDeviceNodes([]string{containeredits.RDMACM})
	}
	if p.MemlockHook != "" && memlock > 0 {
		spec.ContainerEdits.Hooks = []*cdispec.Hook{memlockhook.CDIHook(p.MemlockHook, memlock)}
	}
	ids := map[string]string{}
	for _, req := range requests {
		devs := byRequest[req]
		name := cdiDeviceName(c.UID, req)
		var env []string
		if ncclRequest[req] {
			e := containeredits.FabricEnv(ncclDevs)
			for _, k := range slices.Sorted(maps.Keys(e)) {
				env = append(env, k+"="+e[k])
			}
		}
		edits := cdispec.ContainerEdits{Env: env, DeviceNodes: containeredits.CDIDeviceNodes(containeredits.DeviceNodes(devs))}
		if ids := netdevs[req]; len(ids) > 0 {
			edits.Hooks = []*cdispec.Hook{memlockhook.CDINetdevHook(p.MemlockHook, memlockhook.NetdevCheck{StateDir: fc.StateDir,
				Pool: fc.Pool, How: netdevcheck.DRAChained.How(), Devices: ids, PodUIDs: rec.PodUIDs})}
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
		ids[req] = CDIKind + "=" + name
	}
	// Apply: the record first, so a crash between the two leaves a record
	// Unprepare cleans up rather than a spec nothing knows of.
	if err := claimrecord.Write(p.StateDir, rec); err != nil {
		return nil, fmt.Errorf("prepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	p.remember(rec)
	if err := containeredits.WriteSpec(p.specPath(c.UID), spec); err != nil {
		return nil, fmt.Errorf("prepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	out := make([]Prepared, 0, len(c.Results))
	for _, r := range c.Results {
		pr := Prepared{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if id, ok := ids[r.Request]; ok {
			pr.CDIDeviceIDs = []string{id}
			delete(ids, r.Request)
		}
		out = append(out, pr)
	}
	return out, nil
}

// Unprepare removes the claim's CDI spec and its record. A claim that is
// not prepared (never was, already unprepared, or prepared before a reboot
// cleared the state) is not an error.
func (p *Preparer) Unprepare(uid string) error {
	if err := claimrecord.CheckUID(uid); err != nil {
		return fmt.Errorf("unprepare claim: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := containeredits.RemoveSpec(p.specPath(uid)); err != nil {
		return fmt.Errorf("unprepare claim %s: %w", uid, err)
	}
	if err := claimrecord.Remove(p.StateDir, uid); err != nil {
		return fmt.Errorf("unprepare claim %s: %w", uid, err)
	}
	delete(p.known, uid)
	return nil
}

// Restore writes again, from memory, the records of prepared claims whose
// file is gone (records). The agent calls it every FilesInterval
// (agent.FileKeeper, through the Driver), so a record the CNI plugin moved
// aside is back within that interval.
func (p *Preparer) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.records(); err != nil && p.Log != nil {
		p.Log.Warn("check the claim records", "err", err)
	}
}

func (p *Preparer) remember(rec claimrecord.Record) {
	if p.known == nil {
		p.known = map[string]claimrecord.Record{}
	}
	p.known[rec.UID] = rec
}

// Prepared returns the records of the prepared claims, sorted by UID.
func (p *Preparer) Prepared() ([]claimrecord.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records()
}

// PreparedClaims lists the UIDs of the prepared claims, sorted.
func (p *Preparer) PreparedClaims() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	recs, err := p.records()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.UID)
	}
	slices.Sort(out)
	return out, nil
}

type poolDevice struct{ pool, device string }

// holder is a prepared claim holding a device: shared when every claim
// that holds it holds a share (a shareID), so another share may join.
type holder struct {
	claim  string
	shared bool
}

// held maps every device of a prepared claim other than uid to a claim
// holding it.
func (p *Preparer) held(uid string) (map[poolDevice]holder, error) {
	recs, err := p.records()
	if err != nil {
		return nil, err
	}
	out := map[poolDevice]holder{}
	for _, r := range recs {
		if r.UID == uid {
			continue
		}
		for _, d := range r.Devices {
			if d.AdminAccess {
				continue
			}
			k := poolDevice{d.Pool, d.Device}
			h, seen := out[k]
			if !seen || (h.shared && !d.Shared()) {
				out[k] = holder{claim: r.Namespace + "/" + r.Name, shared: d.Shared()}
			}
		}
	}
	return out, nil
}

// records lists the prepared claims; no directory yet is none.
// A record that does not decode is moved aside and logged; it costs only its
// own claim, which the kubelet prepares again.
func (p *Preparer) records() ([]claimrecord.Record, error) {
	recs, damaged, err := claimrecord.ReadAll(p.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		recs, err = nil, nil
	}
	if p.Log != nil {
		for _, d := range damaged {
			p.Log.Error("claim record does not decode; moved aside, written again from memory when this process prepared or read it before, else when the kubelet prepares its claim again",
				"path", d.Path, "movedTo", d.Moved, "err", d.Err)
		}
	}
	if err != nil {
		return recs, err
	}
	return p.restoreGone(recs), nil
}

// restoreGone writes again the known records missing from recs (what is on
// disk) whose claim's CDI spec is still there: prepared, not unprepared
// (Unprepare removes the spec first), so the file was moved aside (torn) or
// removed by hand. A known record whose spec is gone too is forgotten. It
// returns recs with the records written again, sorted by UID, and makes
// known what is on disk: a record read is one this process can restore.
func (p *Preparer) restoreGone(recs []claimrecord.Record) []claimrecord.Record {
	on := make(map[string]bool, len(recs))
	for _, r := range recs {
		on[r.UID] = true
	}
	added := false
	for _, uid := range slices.Sorted(maps.Keys(p.known)) {
		if on[uid] {
			continue
		}
		rec := p.known[uid]
		if _, err := os.Stat(p.specPath(uid)); err != nil {
			delete(p.known, uid)
			continue
		}
		if err := claimrecord.Write(p.StateDir, rec); err != nil {
			if p.Log != nil {
				p.Log.Warn("write a missing claim record again", "claim", rec.Namespace+"/"+rec.Name, "uid", uid, "err", err)
			}
			continue
		}
		if p.Log != nil {
			p.Log.Warn("claim record was missing while its claim is prepared (moved aside as torn?); written again from memory",
				"claim", rec.Namespace+"/"+rec.Name, "uid", uid, "devices", len(rec.Devices))
		}
		recs = append(recs, rec)
		added = true
	}
	if added {
		slices.SortFunc(recs, func(a, b claimrecord.Record) int { return strings.Compare(a.UID, b.UID) })
	}
	for _, r := range recs {
		p.remember(r)
	}
	return recs
}

// podUIDs is the pods' UIDs sorted, without repeats or empty ones.
func podUIDs(uids []string) []string {
	out := slices.DeleteFunc(slices.Clone(uids), func(s string) bool { return s == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

func (p *Preparer) specPath(uid string) string {
	return filepath.Join(p.CDIDir, "kube-rdma-claim-"+uid+".json")
}

// cdiDeviceName is "<claim uid>-<request>", the request's "/" (before a
// subrequest) written as "." for CDI's character set.
func cdiDeviceName(uid, request string) string {
	return uid + "-" + strings.ReplaceAll(request, "/", ".")
}
