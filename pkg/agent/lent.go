package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/natsort"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// LentDevices says which RDMA devices the CNI plugin has lent to pods: in
// the kernel's exclusive RDMA netns mode a device moved into a pod's network
// namespace (a hardware one, or a soft-RoCE one re-created there) is gone
// from the host's class/infiniband, which the agent reads from the host
// netns. cmd/device-plugin implements it over the CNI plugin's attachment
// records (pkg/hostapi/attachment, --cni-state-dir).
type LentDevices interface {
	// LentDevices returns the names of the RDMA devices lent now. An
	// error keeps the last answer.
	LentDevices() (map[string]bool, error)
}

// lentKeeper keeps in the pools the devices that are lent to pods, which
// the node watcher no longer sees, from the last snapshot it saw them in,
// until their records go. A device the watcher no longer sees and that is
// not lent stays for a grace, unhealthy, then goes: the kubelet stops
// handing it out at once, and its pool membership (the CDI spec, the
// ResourceSlice) holds until a record has had time to be read. It is owned
// by the agent's Run goroutine.
//
// A restarted daemon has never seen a device already in a pod: the
// attachment record names it, not its ports, GIDs or char devices. So the
// devices kept as lent are written to file (Config.LentFile, the agent's
// own), and a new keeper starts from them as seen: each is kept again as
// long as the records say it is lent, and goes after the grace when they
// do not. The pools, CDI specs, slices and node state are then the same
// across the restart.
type lentKeeper struct {
	src   LentDevices // nil: none is ever lent
	grace time.Duration
	log   *slog.Logger
	file  string // "" keeps nothing across restarts

	seen map[string]seenDevice // every device seen and not dropped, by name
	lent map[string]bool       // the last good answer of src
	err  string                // the last error of src, logged once
	kept []string              // the names added to the last snapshot, sorted

	written     []string // the names in file, sorted
	writeFailed bool     // the last write or removal of file failed: try again
	withdrawn   bool     // the chart is being uninstalled: file removed, written no more
}

// seenDevice is a device as last seen, and since when it is missing.
type seenDevice struct {
	dev     discovery.RDMADevice
	missing time.Time // zero while the watcher sees it
}

// lentGrace is how long a device the watcher no longer sees is kept before
// it is dropped when no record says it is lent: two re-reads of the node
// watcher (2 x 500 ms by default). The CNI plugin saves its record before it
// moves a device (pkg/cni add.go, "The record goes first"), so in the
// common case the record is there when the device goes and the grace is
// not waited for. It covers the reader's side: the records are read
// without the plugin's lock, at the snapshot of the change, and a read
// that misses a record (a torn one moved aside until the plugin's next
// save, a transient read error) is tried again with every snapshot and at
// the end of the grace. Two ticks let one
// re-read of the node pass in between; more would delay, for a device really
// removed, the kubelet's learning that it is gone, which the health interval
// (DefaultHealthInterval: half the 1 s the kubelet should wait at most)
// budgets: the device is unhealthy from the first snapshot without it.
func lentGrace(healthInterval time.Duration) time.Duration { return 2 * healthInterval }

func newLentKeeper(src LentDevices, grace time.Duration, log *slog.Logger, file string) *lentKeeper {
	k := &lentKeeper{src: src, grace: grace, log: log, seen: map[string]seenDevice{}, lent: map[string]bool{}}
	if src != nil {
		k.file = file
	}
	k.load()
	return k
}

// lentFile is the format of the lent-devices file.
type lentFile struct {
	Version int                    `json:"version"`
	Devices []discovery.RDMADevice `json:"devices"`
}

const lentFileVersion = 1

// load seeds seen with the devices of file, as an earlier process last saw
// them lent. A file that cannot be read or decoded is logged and ignored:
// its devices are then missing from their pools until their pods give them
// back, as without the file, and the next write replaces it.
func (k *lentKeeper) load() {
	if k.file == "" {
		return
	}
	data, err := os.ReadFile(k.file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var f lentFile
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err == nil && f.Version != lentFileVersion {
		err = fmt.Errorf("version %d, want %d", f.Version, lentFileVersion)
	}
	if err != nil {
		k.log.Warn("read the devices lent to pods before this restart; those still in pods are missing from their pools until given back",
			"path", k.file, "err", err)
		k.writeFailed = true // replaced by the next write
		return
	}
	for _, dev := range f.Devices {
		if dev.Name == "" {
			continue
		}
		k.seen[dev.Name] = seenDevice{dev: dev}
		k.written = append(k.written, dev.Name)
	}
	slices.Sort(k.written)
	if len(k.written) > 0 {
		k.log.Info("devices lent to pods before this restart, kept while their records say so", "devices", k.written, "path", k.file)
	}
}

// persist writes the devices kept as lent to file when they changed (or
// the last write failed); none removes it.
func (k *lentKeeper) persist(kept []discovery.RDMADevice) {
	if k.file == "" || k.withdrawn {
		return
	}
	var devs []discovery.RDMADevice
	var names []string
	for _, dev := range kept {
		if k.lent[dev.Name] {
			devs, names = append(devs, dev), append(names, dev.Name)
		}
	}
	slices.Sort(names)
	if slices.Equal(names, k.written) && !k.writeFailed {
		return
	}
	var err error
	if len(devs) == 0 {
		if err = os.Remove(k.file); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	} else {
		var data []byte
		if data, err = json.MarshalIndent(lentFile{Version: lentFileVersion, Devices: devs}, "", "  "); err == nil {
			err = atomicfile.Write(k.file, append(data, '\n'), 0o644, ".lent-devices-*")
		}
	}
	if k.writeFailed = err != nil; err != nil {
		k.log.Warn("write the devices lent to pods; a restart now would forget them until their pods give them back", "path", k.file, "err", err)
		return
	}
	k.written = names
}

// withdraw removes file and writes it no more: the chart is being
// uninstalled. A failed removal is tried again at the next call.
func (k *lentKeeper) withdraw() {
	if k.file == "" || (k.withdrawn && !k.writeFailed) {
		return
	}
	k.withdrawn = true
	err := os.Remove(k.file)
	if k.writeFailed = err != nil && !errors.Is(err, fs.ErrNotExist); k.writeFailed {
		k.log.Warn("remove the devices lent to pods", "path", k.file, "err", err)
	}
}

// apply returns snap with the devices kept added (healthy when lent,
// unhealthy in their grace), or snap itself when none is, and whether the
// set of devices kept changed since the last call. It asks src only while
// a device seen is missing.
func (k *lentKeeper) apply(snap *nodewatch.Snapshot, now time.Time) (*nodewatch.Snapshot, bool) {
	present := map[string]bool{}
	if snap.Node != nil {
		for _, dev := range snap.Node.RDMADevices {
			present[dev.Name] = true
			k.seen[dev.Name] = seenDevice{dev: dev}
		}
	}
	missing := false
	for name, s := range k.seen {
		if !present[name] {
			missing = true
			if s.missing.IsZero() {
				s.missing = now
				k.seen[name] = s
			}
		}
	}
	if missing {
		k.readLent()
	}
	var kept []discovery.RDMADevice
	health := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(k.seen)) {
		s := k.seen[name]
		switch {
		case present[name]:
		case k.lent[name]:
			// In a pod's network namespace: its ports cannot be read from
			// the host's, and the pod holds it; the last seen state stands.
			kept = append(kept, s.dev)
			health[name] = true
		case now.Sub(s.missing) < k.grace:
			kept = append(kept, s.dev)
			health[name] = false
		default:
			delete(k.seen, name)
		}
	}
	names := make([]string, 0, len(kept))
	for _, dev := range kept {
		names = append(names, dev.Name)
	}
	changed := !slices.Equal(names, k.kept)
	k.kept = names
	k.persist(kept)
	if len(kept) == 0 {
		return snap, changed
	}
	out := *snap
	node := discovery.Node{}
	if snap.Node != nil {
		node = *snap.Node
	}
	node.RDMADevices = append(slices.Clip(node.RDMADevices), kept...)
	slices.SortFunc(node.RDMADevices, func(a, b discovery.RDMADevice) int { return natsort.Compare(a.Name, b.Name) })
	out.Node = &node
	out.Healthy = maps.Clone(snap.Healthy)
	if out.Healthy == nil {
		out.Healthy = map[string]bool{}
	}
	maps.Copy(out.Healthy, health)
	return &out, changed
}

// readLent asks src, keeping the last answer on an error (logged once).
func (k *lentKeeper) readLent() {
	if k.src == nil {
		return
	}
	lent, err := k.src.LentDevices()
	if err != nil {
		if err.Error() != k.err {
			k.log.Warn("read the devices lent to pods; the last answer stands", "err", err)
		}
		k.err = err.Error()
		return
	}
	k.err = ""
	k.lent = lent
}

// missing reports whether a device seen is missing (kept or in its grace):
// the records are worth reading again.
func (k *lentKeeper) missing() bool { return len(k.kept) > 0 }

// wake is when the first grace ends, ok false when none runs.
func (k *lentKeeper) wake() (at time.Time, ok bool) {
	for _, s := range k.seen {
		if s.missing.IsZero() || k.lent[s.dev.Name] {
			continue
		}
		if end := s.missing.Add(k.grace); !ok || end.Before(at) {
			at, ok = end, true
		}
	}
	return at, ok
}
