// Command plot draws docs/scale.png from the figures make scale writes
// (docs/scale.json): each figure against the node count N, ours next to
// its reference, a point per run and a line through their mean. It is its own module so that gonum's plot is no
// dependency of kube-rdma's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// result is the part of hack/scale's Result the plot reads.
type result struct {
	Run         string             `json:"run"`
	N           int                `json:"n"`
	EtcdBytes   map[string]float64 `json:"etcdBytesPerNode"`
	Steady      map[string]float64 `json:"steadyWritesPerNodeMin"`
	StormWrites struct {
		PerNode map[string]float64 `json:"writesPerFlappingNodeMin"`
	} `json:"storm"`
	Kubectl []struct {
		Command string  `json:"command"`
		WallS   float64 `json:"wallS"`
		RSSMiB  float64 `json:"rssMiB"`
	} `json:"kubectl"`
	Sched []struct {
		Claim     string  `json:"claim"`
		Scheduled int     `json:"scheduled"`
		PerS      float64 `json:"scheduledPerS"`
		P50S      float64 `json:"p50S"`
		P99S      float64 `json:"p99S"`
		Aligned   float64 `json:"alignedShare"`
	} `json:"sched"`
}

type series struct {
	name string
	y    func(r result) float64
}

type panel struct {
	title, ylabel string
	series        []series
}

func kubectl(cmd string, rss bool) func(r result) float64 {
	return func(r result) float64 {
		for _, k := range r.Kubectl {
			if k.Command == cmd {
				if rss {
					return k.RSSMiB
				}
				return k.WallS
			}
		}
		return 0
	}
}

func sched(claim string, f func(perS, p50, p99, aligned float64) float64) func(r result) float64 {
	return func(r result) float64 {
		for _, s := range r.Sched {
			if s.Claim == claim && s.Scheduled > 0 {
				return f(s.PerS, s.P50S, s.P99S, s.Aligned)
			}
		}
		return math.NaN() // not measured: no pod was scheduled
	}
}

func sum(m map[string]float64, keys ...string) float64 {
	t := 0.0
	for k, v := range m {
		for _, want := range keys {
			if k == want || strings.HasPrefix(k, want+"/") {
				t += v
			}
		}
	}
	return t
}

var panels = []panel{
	{"etcd bytes per HGX node", "KiB", []series{
		{"Node (reference)", func(r result) float64 { return r.EtcdBytes["node"] / 1024 }},
		{"RDMANodeState", func(r result) float64 { return r.EtcdBytes["rdmanodestate"] / 1024 }},
		{"our ResourceSlice", func(r result) float64 { return r.EtcdBytes["resourceslices/rdma"] / 1024 }},
	}},
	{"writes per node per minute, steady", "writes/node/min", []series{
		{"RDMANodeState", func(r result) float64 { return sum(r.Steady, "rdmanodestates") }},
		{"ResourceSlices", func(r result) float64 { return sum(r.Steady, "resourceslices") }},
	}},
	{"writes per flapping node per minute, storm", "writes/node/min", []series{
		{"RDMANodeState", func(r result) float64 { return sum(r.StormWrites.PerNode, "rdmanodestates") }},
		{"ResourceSlices", func(r result) float64 { return sum(r.StormWrites.PerNode, "resourceslices") }},
	}},
	{"kubectl wall time (median of 3)", "s", []series{
		{"kubectl rdma nodes", kubectl("nodes", false)},
		{"kubectl get rdmanodestates", kubectl("get rdmanodestates", false)},
		{"kubectl rdma pods -A", kubectl("pods -A", false)},
		{"kubectl get pods -A", kubectl("get pods -A", false)},
	}},
	{"kubectl max RSS", "MiB", []series{
		{"kubectl rdma nodes", kubectl("nodes", true)},
		{"kubectl get rdmanodestates", kubectl("get rdmanodestates", true)},
		{"kubectl rdma pods -A", kubectl("pods -A", true)},
		{"kubectl get pods -A", kubectl("get pods -A", true)},
	}},
	{"DRA scheduling: pods scheduled per second", "pods/s", []series{
		{"GPU+NIC matchAttribute", sched("aligned", func(p, _, _, _ float64) float64 { return p })},
		{"GPU+NIC unaligned", sched("unaligned", func(p, _, _, _ float64) float64 { return p })},
	}},
	{"DRA scheduling: create to scheduled", "s", []series{
		{"aligned P50", sched("aligned", func(_, p50, _, _ float64) float64 { return p50 })},
		{"aligned P99", sched("aligned", func(_, _, p99, _ float64) float64 { return p99 })},
		{"unaligned P50", sched("unaligned", func(_, p50, _, _ float64) float64 { return p50 })},
		{"unaligned P99", sched("unaligned", func(_, _, p99, _ float64) float64 { return p99 })},
	}},
	{"DRA: NIC under the GPU's PCIe switch", "%", []series{
		{"matchAttribute pcieRoot", sched("aligned", func(_, _, _, a float64) float64 { return 100 * a })},
		{"unaligned", sched("unaligned", func(_, _, _, a float64) float64 { return 100 * a })},
	}},
}

func main() {
	in := flag.String("in", "docs/scale.json", "hack/scale's figures")
	out := flag.String("out", "docs/scale.png", "the PNG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("read figures: %w", err)
	}
	var rs []result
	if err := json.Unmarshal(b, &rs); err != nil {
		return fmt.Errorf("decode %s: %w", in, err)
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	img := vgimg.New(vg.Length(cols)*6*vg.Inch, vg.Length(rows)*3.4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4,
		PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "nodes (N)"
		p.Y.Label.Text = pn.ylabel
		p.Y.Min = 0
		maxN, maxY := 0.0, 1.0
		for _, r := range rs {
			maxN = max(maxN, float64(r.N))
			for _, s := range pn.series {
				if y := s.y(r); !math.IsNaN(y) {
					maxY = max(maxY, y)
				}
			}
		}
		// Room for the legend above the lines.
		p.X.Min, p.X.Max = 0, 1.05*maxN
		p.Y.Max = 1.45 * maxY
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		for j, s := range pn.series {
			// Each run's figure as a point, the line through their mean
			// at each N.
			var pts, line plotter.XYs
			byN := map[int][]float64{}
			var ns []int
			for _, r := range rs {
				if y := s.y(r); !math.IsNaN(y) {
					pts = append(pts, plotter.XY{X: float64(r.N), Y: y})
					if byN[r.N] == nil {
						ns = append(ns, r.N)
					}
					byN[r.N] = append(byN[r.N], y)
				}
			}
			if len(pts) == 0 {
				continue
			}
			slices.Sort(ns)
			for _, n := range ns {
				t := 0.0
				for _, y := range byN[n] {
					t += y
				}
				line = append(line, plotter.XY{X: float64(n), Y: t / float64(len(byN[n]))})
			}
			l, err := plotter.NewLine(line)
			if err != nil {
				return fmt.Errorf("%s: %w", pn.title, err)
			}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return fmt.Errorf("%s: %w", pn.title, err)
			}
			c := plotutil.Color(j)
			l.Color, sc.Color = c, c
			sc.Shape = plotutil.Shape(j)
			l.Width = vg.Points(1.5)
			p.Add(l, sc)
			p.Legend.Add(s.name, l, sc)
		}
		p.BackgroundColor = color.White
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	return f.Close()
}
