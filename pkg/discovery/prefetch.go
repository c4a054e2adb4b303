package discovery

import (
	"slices"
	"strconv"
	"strings"
)

// attrCache holds attributes and directory listings read ahead of the code
// that uses them. The readers (readPCIAttrs, readPorts, readGIDs...) stay
// written as if they read one file at a time, in the order whose first error
// wins; prefetch only makes their reads hit memory.
type attrCache struct {
	attrs map[attrKey]attrResult
	lists map[attrKey]listResult
}

type attrKey struct {
	fd  int
	rel string
}

type attrResult struct {
	val string
	err error
}

type listResult struct {
	names []string
	err   error
}

func newAttrCache() *attrCache {
	return &attrCache{attrs: map[attrKey]attrResult{}, lists: map[attrKey]listResult{}}
}

// attrReq is one attribute for a batch read: rel below d.
type attrReq struct {
	d   dir
	rel string
	val string
	err error
}

// readBatch reads reqs with the ring, or one by one without one, and stores
// the results in c.
func readBatch(r *ring, c *attrCache, reqs []attrReq) {
	if r != nil {
		r.readAll(reqs)
	} else {
		for i := range reqs {
			reqs[i].val, reqs[i].err = reqs[i].d.readNow(reqs[i].rel)
		}
	}
	for _, q := range reqs {
		c.attrs[attrKey{q.d.fd, q.d.pre + q.rel}] = attrResult{q.val, q.err}
	}
}

// gidWindow is how many GID slots of a port one batch reads: the populated
// slots of a RoCE function (4 on an mlx5 VF) and the run of empty ones that
// ends the scan fit in one.
const gidWindow = emptyGIDRun + 4

// prefetch reads what readRDMADevice reads from a device's directories, in
// as few batches as it can: PCI identity, netdev ports, node GUID, port
// attributes and, for ports that look like RoCE, the first window of the GID
// table with each slot's type and netdev, all in one; then whatever that
// batch showed is still to read. Directory listings stay system calls
// (io_uring has no getdents) and are cached too. pci and fn are closed dirs
// (fd -1) for a device off PCI.
//
// A guess only decides what is read ahead, never what the readers see: a
// port looks like RoCE when the device is off PCI (soft-RoCE) or has a
// netdev not named ib*: one batch per device instead of three.
func prefetch(r *ring, c *attrCache, ib, pci, fn dir) {
	f := &prefetcher{r: r, c: c, ib: ib, pci: pci, fn: fn}
	f.listDirs()
	looksRoCE := f.addDeviceAttrs()
	pg := f.addPorts(looksRoCE)
	readBatch(r, c, f.reqs)
	f.settleGIDSlots(pg)
	for f.nextGIDRound(pg) {
		readBatch(r, c, f.reqs)
	}
}

// prefetcher is one device's prefetch: its directories and the batch being built.
type prefetcher struct {
	r           *ring
	c           *attrCache
	ib, pci, fn dir
	reqs        []attrReq
}

// portGIDs tracks how far prefetch has read one port's GID table.
type portGIDs struct {
	prefix             string
	listed, roce, done bool
	idx                []int // the slots readGIDs reads, in order
	pos, empty         int
}

// add queues rel below d for the next batch.
func (f *prefetcher) add(d dir, rel string) {
	f.reqs = append(f.reqs, attrReq{d: d, rel: rel})
}

// listDirs caches the device's directory listings (with a ring only).
func (f *prefetcher) listDirs() {
	if f.r == nil {
		return
	}
	dirs := []attrReq{{d: f.ib, rel: "ports"}, {d: f.ib, rel: "ports/1/gids"}}
	if f.pci.fd >= 0 {
		dirs = append(dirs, attrReq{d: f.fn, rel: "net"})
	}
	f.r.listDirs(f.c, dirs)
}

// addDeviceAttrs queues the PCI identity (or parent), netdev ports and node
// GUID, and reports whether the device's ports look like RoCE.
func (f *prefetcher) addDeviceAttrs() bool {
	looksRoCE := f.pci.fd < 0
	if f.pci.fd >= 0 {
		f.add(f.pci, "vendor")
		f.add(f.pci, "device")
		f.add(f.pci, "numa_node")
		nets, _ := f.fn.names("net")
		for _, n := range nets {
			f.add(f.fn, "net/"+n+"/dev_port")
			looksRoCE = looksRoCE || !strings.HasPrefix(n, "ib")
		}
	} else {
		f.add(f.ib, "parent")
	}
	f.add(f.ib, "node_guid")
	return looksRoCE
}

// addPorts queues each port's attributes and the GIDs to read ahead: the
// first window with types and netdevs if it looks like RoCE, else slot 0.
func (f *prefetcher) addPorts(looksRoCE bool) []*portGIDs {
	ports, _ := f.ib.names("ports")
	var pg []*portGIDs
	for _, name := range ports {
		if num, err := strconv.Atoi(name); err != nil || num < 1 {
			continue
		}
		p := &portGIDs{prefix: "ports/" + name + "/"}
		for _, a := range []string{"state", "phys_state", "link_layer", "rate"} {
			f.add(f.ib, p.prefix+a)
		}
		if looksRoCE {
			f.listGIDs(p)
			f.addWindow(p, true)
		} else {
			f.add(f.ib, p.prefix+"gids/0") // the port GID, all InfiniBand reads
		}
		pg = append(pg, p)
	}
	return pg
}

// listGIDs sets p's slots to the numbered entries of its gids directory, sorted.
func (f *prefetcher) listGIDs(p *portGIDs) {
	p.listed = true
	names, _ := f.ib.names(p.prefix + "gids")
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 {
			p.idx = append(p.idx, i)
		}
	}
	slices.Sort(p.idx)
}

// addWindow queues the next window of p's GID slots; withAttrs reads each
// slot's type and netdev along, before knowing whether it is populated.
func (f *prefetcher) addWindow(p *portGIDs, withAttrs bool) {
	for _, i := range p.idx[p.pos:min(p.pos+gidWindow, len(p.idx))] {
		si := strconv.Itoa(i)
		f.add(f.ib, p.prefix+"gids/"+si)
		if withAttrs {
			f.add(f.ib, p.prefix+"gid_attrs/types/"+si)
			f.add(f.ib, p.prefix+"gid_attrs/ndevs/"+si)
		}
	}
}

// settleGIDSlots fixes the GID slots readGIDs will read: slot 0 on
// InfiniBand, the listed slots in order on Ethernet until a run of empty ones.
func (f *prefetcher) settleGIDSlots(pg []*portGIDs) {
	for _, p := range pg {
		if v := f.c.attrs[attrKey{f.ib.fd, p.prefix + "link_layer"}]; v.err != nil || v.val != "Ethernet" {
			p.idx, p.pos, p.listed = []int{0}, 0, true
			continue
		}
		p.roce = true
		if !p.listed {
			f.listGIDs(p)
		}
	}
}

// nextGIDRound takes in the GID values read so far and queues the next
// batch; it reports whether there is anything to read.
//
// Each round reads the next window of values and the type and netdev of the
// populated slots that were not read along: an empty slot's type and netdev
// are not read once its emptiness is known: reading them ahead for a whole
// window costs more than it saves (docs/device-plugin.md, "Discovery
// measurements").
func (f *prefetcher) nextGIDRound(pg []*portGIDs) bool {
	f.reqs = f.reqs[:0]
	for _, p := range pg {
		f.takeGIDs(p)
		p.done = p.done || p.empty >= emptyGIDRun || p.pos >= len(p.idx)
		if !p.done {
			f.addWindow(p, false)
		}
	}
	return len(f.reqs) > 0
}

// takeGIDs walks p's GID values already read, as readGIDs will, queueing the
// type and netdev of populated RoCE slots not read along.
func (f *prefetcher) takeGIDs(p *portGIDs) {
	for !p.done && p.pos < len(p.idx) && p.empty < emptyGIDRun {
		si := strconv.Itoa(p.idx[p.pos])
		v, ok := f.c.attrs[attrKey{f.ib.fd, p.prefix + "gids/" + si}]
		if !ok {
			break
		}
		gid, err := ParseGID(v.val)
		switch {
		case v.err != nil && isEmptySlot(v.err), v.err == nil && err == nil && gid == "":
			p.empty++
		case v.err != nil, err != nil:
			p.done = true // readGIDs stops at this error
		default:
			p.empty = 0
			if _, ok := f.c.attrs[attrKey{f.ib.fd, p.prefix + "gid_attrs/types/" + si}]; !ok && p.roce {
				f.add(f.ib, p.prefix+"gid_attrs/types/"+si)
				f.add(f.ib, p.prefix+"gid_attrs/ndevs/"+si)
			}
		}
		p.pos++
	}
}
