// Package report renders what discovery saw for people: a device table and a
// GPU x RDMA device matrix in the style of `nvidia-smi topo -m`. It is pure:
// a Node in, text out. The device plugin's `discover` command and the kubectl
// plugin share it.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// WriteTable writes the RDMA device table (with NUMA node and PCIe root),
// then the affinity matrix and its legend, then any warnings.
func WriteTable(w io.Writer, n *discovery.Node) error {
	return WriteTableWith(w, n, TableOptions{})
}

// TableOptions change WriteTableWith's device table.
type TableOptions struct {
	// NoCharDevices leaves out the CHAR DEVICES column, for a Node built
	// from a source that does not carry them (the kube-rdma node state).
	NoCharDevices bool
}

// WriteTableWith is WriteTable with options.
func WriteTableWith(w io.Writer, n *discovery.Node, o TableOptions) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	header := "RDMA DEVICE\tKIND\tPCI\tNUMA\tPCIE ROOT\tNETDEV\tPORTS\tLINK\tRATE"
	if !o.NoCharDevices {
		header += "\tCHAR DEVICES"
	}
	fmt.Fprintln(tw, header)
	for _, d := range n.RDMADevices {
		pci := d.PCIAddress
		if pci == "" {
			pci = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", d.Name, d.Kind, pci, numa(d.NUMANode), dash(d.PCIeRoot),
			dash(strings.Join(d.Netdevs, ",")), portStates(d.Ports), dash(d.LinkLayer), dash(firstRate(d.Ports)))
		if !o.NoCharDevices {
			fmt.Fprintf(tw, "\t%s", charNames(d.CharDevices))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(n.RDMADevices) == 0 {
		fmt.Fprintln(w, "(no RDMA devices)")
	}
	if len(n.GPUs) > 0 {
		fmt.Fprintln(w)
		if err := WriteMatrix(w, n); err != nil {
			return err
		}
	}
	for _, warn := range n.Warnings {
		if _, err := fmt.Fprintf(w, "warning: %s\n", warn); err != nil {
			return err
		}
	}
	return nil
}

// WriteMatrix writes one row per GPU (GPU0.. in PCI order) and one column
// per RDMA device, each cell the PCIe level between them, then a legend.
func WriteMatrix(w io.Writer, n *discovery.Node) error {
	level := make(map[[2]string]discovery.Level, len(n.Affinity))
	for _, a := range n.Affinity {
		level[[2]string{a.GPU, a.RDMADevice}] = a.Level
	}
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprint(tw, "\t")
	for _, d := range n.RDMADevices {
		fmt.Fprintf(tw, "%s\t", d.Name)
	}
	fmt.Fprintln(tw, "PCI\tNUMA\tPCIE ROOT\tUUID")
	for i, g := range n.GPUs {
		fmt.Fprintf(tw, "GPU%d\t", i)
		for _, d := range n.RDMADevices {
			l := level[[2]string{g.PCIAddress, d.Name}]
			if l == "" {
				l = "?"
			}
			fmt.Fprintf(tw, "%s\t", l)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.PCIAddress, numa(g.NUMANode), dash(g.PCIeRoot), dash(g.UUID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprint(w, `
Legend:
  PIX  = both under one PCIe switch
  PXB  = through several PCIe bridges or switches, without the host bridge
  PHB  = through a PCIe host bridge (same root complex, different root ports)
  NODE = between PCIe host bridges within one NUMA node
  SYS  = across NUMA nodes (or NUMA placement unknown on a multi-node host)
`)
	return err
}

func numa(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func portStates(ports []discovery.Port) string {
	if len(ports) == 0 {
		return "-"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("%d:%s", p.Port, p.State)
	}
	return strings.Join(s, ",")
}

func firstRate(ports []discovery.Port) string {
	if len(ports) == 0 {
		return ""
	}
	return ports[0].Rate
}

func charNames(paths []string) string {
	if len(paths) == 0 {
		return "-"
	}
	s := make([]string, len(paths))
	for i, p := range paths {
		s[i] = strings.TrimPrefix(p, "/dev/infiniband/")
	}
	return strings.Join(s, ",")
}

// Formats are the output formats Write knows.
var Formats = []string{"table", "json"}

// Write writes n as a table (WriteTable) or as the indented JSON contract.
func Write(w io.Writer, n *discovery.Node, format string) error {
	switch format {
	case "table":
		return WriteTable(w, n)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(n)
	}
	return fmt.Errorf("output format %q: want %s", format, strings.Join(Formats, " or "))
}
