package discovery

import (
	"slices"
	"strconv"
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
		c.attrs[attrKey{q.d.fd, q.rel}] = attrResult{q.val, q.err}
	}
}

// gidWindow is how many GID slots of a port one batch reads: the populated
// slots of a RoCE function (4 on an mlx5 VF) and the run of empty ones that
// ends the scan fit in one.
const gidWindow = emptyGIDRun + 4

// prefetch reads what readRDMADevice reads from a device's directories, in
// a few batches: PCI identity, netdev ports, node GUID and port attributes
// first, then the GID tables a window at a time. Directory listings stay
// system calls (io_uring has no getdents) and are cached too. pci and fn are
// closed dirs (fd -1) for a device off PCI.
func prefetch(r *ring, c *attrCache, ib, pci, fn dir) {
	var reqs []attrReq
	add := func(d dir, rel string) { reqs = append(reqs, attrReq{d: d, rel: rel}) }
	if pci.fd >= 0 {
		add(pci, "vendor")
		add(pci, "device")
		add(pci, "numa_node")
		nets, _ := fn.names("net")
		for _, n := range nets {
			add(fn, "net/"+n+"/dev_port")
		}
	} else {
		add(ib, "parent")
	}
	add(ib, "node_guid")
	ports, _ := ib.names("ports")
	type portGIDs struct {
		prefix     string
		roce, done bool
		idx        []int // the slots readGIDs reads, in order
		pos, empty int
	}
	var pg []*portGIDs
	for _, name := range ports {
		if num, err := strconv.Atoi(name); err != nil || num < 1 {
			continue
		}
		prefix := "ports/" + name + "/"
		for _, a := range []string{"state", "phys_state", "link_layer", "rate"} {
			add(ib, prefix+a)
		}
		pg = append(pg, &portGIDs{prefix: prefix})
	}
	readBatch(r, c, reqs)

	// The GID slots readGIDs will read: slot 0 on InfiniBand, the listed
	// slots in order on Ethernet until a run of empty ones.
	for _, p := range pg {
		p.idx = []int{0}
		if v := c.attrs[attrKey{ib.fd, p.prefix + "link_layer"}]; v.err == nil && v.val == "Ethernet" {
			p.roce = true
			names, _ := ib.names(p.prefix + "gids")
			p.idx = p.idx[:0]
			for _, n := range names {
				if i, err := strconv.Atoi(n); err == nil && i >= 0 {
					p.idx = append(p.idx, i)
				}
			}
			slices.Sort(p.idx)
		}
	}
	// Each round reads the next window of GID values and the type and
	// netdev of the populated slots of the previous one: an empty slot's
	// type and netdev are never read.
	var populated []attrReq
	for {
		reqs = append(reqs[:0], populated...)
		populated = populated[:0]
		for _, p := range pg {
			if !p.done {
				for _, i := range p.idx[p.pos:min(p.pos+gidWindow, len(p.idx))] {
					add(ib, p.prefix+"gids/"+strconv.Itoa(i))
				}
			}
		}
		if len(reqs) == 0 {
			return
		}
		readBatch(r, c, reqs)
		for _, p := range pg {
			end := min(p.pos+gidWindow, len(p.idx))
			for ; !p.done && p.pos < end && p.empty < emptyGIDRun; p.pos++ {
				si := strconv.Itoa(p.idx[p.pos])
				v := c.attrs[attrKey{ib.fd, p.prefix + "gids/" + si}]
				gid, err := ParseGID(v.val)
				switch {
				case v.err != nil && isEmptySlot(v.err), v.err == nil && err == nil && gid == "":
					p.empty++
				case v.err != nil, err != nil:
					p.done = true // readGIDs stops at this error
				default:
					p.empty = 0
					if p.roce {
						populated = append(populated, attrReq{d: ib, rel: p.prefix + "gid_attrs/types/" + si},
							attrReq{d: ib, rel: p.prefix + "gid_attrs/ndevs/" + si})
					}
				}
			}
			p.done = p.done || p.empty >= emptyGIDRun || p.pos >= len(p.idx)
		}
	}
}
