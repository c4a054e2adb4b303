package nodesim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func (w *writer) rdma(r RDMA) error {
	var parent string // directory that holds infiniband/<name>
	switch {
	case r.Parent == "":
		parent = w.sys("devices/virtual")
		if r.NetdevParent == "" {
			return fmt.Errorf("virtual device needs NetdevParent")
		}
	case strings.Contains(r.Parent, "/"):
		pf, aux, _ := strings.Cut(r.Parent, "/")
		pfDir, ok := w.fns[pf]
		if !ok {
			return fmt.Errorf("parent %s is not a listed function", pf)
		}
		parent = filepath.Join(pfDir, aux)
		drv := w.sys("bus/auxiliary/drivers/mlx5_core.sf")
		if err := w.mkdir(drv); err != nil {
			return err
		}
		if err := w.link(filepath.Join(parent, "driver"), drv); err != nil {
			return err
		}
		if err := w.link(w.sys("bus/auxiliary/devices", aux), parent); err != nil {
			return err
		}
		for _, n := range r.AuxNetdevs {
			if err := w.netdev(filepath.Join(parent, "net"), n); err != nil {
				return err
			}
		}
	default:
		dir, ok := w.fns[r.Parent]
		if !ok {
			return fmt.Errorf("parent %s is not a listed function", r.Parent)
		}
		parent = dir
	}
	ib := filepath.Join(parent, "infiniband", r.Name)
	if err := w.mkdir(ib); err != nil {
		return err
	}
	if err := w.link(w.sys("class/infiniband", r.Name), ib); err != nil {
		return err
	}
	guid := r.NodeGUID
	if guid == "" {
		guid = "0000:0000:0000:0000"
	}
	attrs := map[string]string{"node_guid": guid, "node_type": "1: CA", "fw_ver": "28.39.1002", "hca_type": "MT4129"}
	if r.Parent == "" {
		attrs["parent"] = r.NetdevParent
		attrs["hca_type"] = ""
	}
	for name, v := range attrs {
		if err := w.file(filepath.Join(ib, name), v); err != nil {
			return err
		}
	}
	for i, p := range r.Ports {
		if err := w.port(filepath.Join(ib, "ports", fmt.Sprint(i+1)), p); err != nil {
			return err
		}
	}
	return w.charDevices(parent, r)
}

func (w *writer) port(dir string, p Port) error {
	for name, v := range map[string]string{
		"state": StateString(p.State), "phys_state": PhysStateString(p.PhysState),
		"link_layer": p.LinkLayer, "rate": p.Rate, "lid": "0x0", "sm_lid": "0x0",
	} {
		if err := w.file(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	for _, d := range []string{"gids", "gid_attrs/types", "gid_attrs/ndevs", "counters", "hw_counters"} {
		if err := w.mkdir(filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	for _, c := range []string{"port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets"} {
		if err := w.file(filepath.Join(dir, "counters", c), "0"); err != nil {
			return err
		}
	}
	for _, g := range p.GIDs {
		i := fmt.Sprint(g.Index)
		if err := w.file(filepath.Join(dir, "gids", i), g.GID); err != nil {
			return err
		}
		if p.LinkLayer != "Ethernet" {
			continue
		}
		if err := w.file(filepath.Join(dir, "gid_attrs/types", i), g.Type); err != nil {
			return err
		}
		if err := w.file(filepath.Join(dir, "gid_attrs/ndevs", i), g.Netdev); err != nil {
			return err
		}
	}
	return nil
}

// charDevices writes uverbsN (one per device) and umadN/issmN (one per port)
// under the owning device, with class links, numbering them in build order
// as the kernel numbers them in probe order.
func (w *writer) charDevices(parent string, r RDMA) error {
	n := w.uverbs
	w.uverbs++
	if err := w.charDev(parent, "infiniband_verbs", fmt.Sprintf("uverbs%d", n), r.Name, 192+n, 0); err != nil {
		return err
	}
	if r.NoMAD {
		return nil
	}
	for i := range r.Ports {
		m := w.umad
		w.umad++
		if err := w.charDev(parent, "infiniband_mad", fmt.Sprintf("umad%d", m), r.Name, m, i+1); err != nil {
			return err
		}
		if err := w.charDev(parent, "infiniband_mad", fmt.Sprintf("issm%d", m), r.Name, 64+m, i+1); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) charDev(parent, class, name, ibdev string, minor, port int) error {
	dir := filepath.Join(parent, class, name)
	if err := w.file(filepath.Join(dir, "ibdev"), ibdev); err != nil {
		return err
	}
	if err := w.file(filepath.Join(dir, "dev"), fmt.Sprintf("231:%d", minor)); err != nil {
		return err
	}
	if port > 0 {
		if err := w.file(filepath.Join(dir, "port"), fmt.Sprint(port)); err != nil {
			return err
		}
	}
	return w.link(w.sys("class", class, name), dir)
}

// SetPortState rewrites one port's state and phys_state in a built tree, as
// the kernel does when a link goes down or comes back.
func (t Tree) SetPortState(dev string, port, state, phys int) error {
	dir := filepath.Join(t.SysRoot, "class/infiniband", dev, "ports", fmt.Sprint(port))
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte(StateString(state)+"\n"), 0o644); err != nil {
		return fmt.Errorf("set port state of %s/%d: %w", dev, port, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "phys_state"), []byte(PhysStateString(phys)+"\n"), 0o644); err != nil {
		return fmt.Errorf("set port state of %s/%d: %w", dev, port, err)
	}
	return nil
}

// RemoveRDMA removes an RDMA device from a built tree (its class link, its
// infiniband directory and its char devices), as a driver unbind does.
func (t Tree) RemoveRDMA(dev string) error {
	link := filepath.Join(t.SysRoot, "class/infiniband", dev)
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return fmt.Errorf("remove rdma device %s: %w", dev, err)
	}
	parent := filepath.Dir(filepath.Dir(target))
	for _, class := range []string{"infiniband_verbs", "infiniband_mad"} {
		names, _ := os.ReadDir(filepath.Join(parent, class))
		for _, n := range names {
			ib, _ := os.ReadFile(filepath.Join(parent, class, n.Name(), "ibdev"))
			if strings.TrimSpace(string(ib)) != dev {
				continue
			}
			if err := os.Remove(filepath.Join(t.SysRoot, "class", class, n.Name())); err != nil {
				return fmt.Errorf("remove rdma device %s: %w", dev, err)
			}
			if err := os.RemoveAll(filepath.Join(parent, class, n.Name())); err != nil {
				return fmt.Errorf("remove rdma device %s: %w", dev, err)
			}
		}
	}
	if err := os.Remove(link); err != nil {
		return fmt.Errorf("remove rdma device %s: %w", dev, err)
	}
	if err := os.RemoveAll(target); err != nil {
		return fmt.Errorf("remove rdma device %s: %w", dev, err)
	}
	return nil
}
