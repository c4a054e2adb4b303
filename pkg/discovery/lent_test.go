package discovery_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// TestLentH100 reads the capture of a real GPU machine (testdata/lent-h100,
// its README says how each file was made) and holds discovery's GPU facts and
// levels to what NVIDIA's own tools printed on that machine in the same run.
func TestLentH100(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar not installed")
	}
	const fixture = "testdata/lent-h100"
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-C", dir, "-xzf", filepath.Join(fixture, "capture.tar.gz")).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	sc := discovery.Scanner{SysRoot: filepath.Join(dir, "sys"), ProcRoot: filepath.Join(dir, "proc")}
	node, err := sc.Scan()
	if err != nil {
		t.Fatal(err)
	}

	// The capture read back is the node the live run printed.
	got, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.ReadFile(filepath.Join(fixture, "discover.json"))
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, live); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, compact.Bytes()) {
		t.Errorf("discovery of the capture differs from the live run:\n got %s\nlive %s", got, compact.Bytes())
	}

	// GPU facts: nvidia-smi -q's attached GPUs, one by one.
	smi := parseSMIQuery(t, filepath.Join(fixture, "nvidia-smi-q.txt"))
	if len(node.GPUs) != len(smi) {
		t.Fatalf("discovery sees %d GPUs, nvidia-smi -q %d", len(node.GPUs), len(smi))
	}
	for i, want := range smi {
		g := node.GPUs[i]
		if g.PCIAddress != want.bus || g.UUID != want.uuid || g.Minor == nil || *g.Minor != want.minor {
			minor := -1
			if g.Minor != nil {
				minor = *g.Minor
			}
			t.Errorf("GPU %d: discovery %s %s minor %d, nvidia-smi -q %s %s minor %d",
				i, g.PCIAddress, g.UUID, minor, want.bus, want.uuid, want.minor)
		}
		// 10de:2330 is the H100 SXM5 80GB (HBM3) in the PCI ID database.
		if g.Vendor != "10de" || g.Device != "2330" || want.product != "NVIDIA H100 80GB HBM3" {
			t.Errorf("GPU %d: discovery %s:%s, nvidia-smi -q names %q", i, g.Vendor, g.Device, want.product)
		}
	}

	// Levels: nvidia-smi topo -m's matrix has a row per GPU and per NIC; it
	// shows one GPU and no NIC, so discovery has no RDMA device and no pair.
	rows, numa := parseTopo(t, filepath.Join(fixture, "nvidia-smi-topo-m.txt"))
	if rows["GPU"] != len(node.GPUs) || rows["NIC"] != len(node.RDMADevices) || len(node.Affinity) != 0 {
		t.Errorf("nvidia-smi topo -m: %d GPUs, %d NICs; discovery %d GPUs, %d RDMA devices, %d pairs",
			rows["GPU"], rows["NIC"], len(node.GPUs), len(node.RDMADevices), len(node.Affinity))
	}
	// sysfs says numa_node -1 (no affinity reported) on a one-node host;
	// nvidia-smi puts the GPU on node 0. Discovery keeps -1 in its JSON but
	// must count the GPU as local to node 0: a NIC on another host bridge of
	// node 0 is NODE from it, not SYS.
	if sc.NUMANodes() != 1 || numa["GPU0"] != "0" {
		t.Fatalf("host NUMA nodes %d, nvidia-smi NUMA affinity %q: the fixture is not the one-node host this test is about", sc.NUMANodes(), numa["GPU0"])
	}
	gpu := discovery.Location{PCIeRoot: node.GPUs[0].PCIeRoot, PCIPath: node.GPUs[0].PCIPath, NUMANode: node.GPUs[0].NUMANode}
	nic := discovery.Location{PCIeRoot: "pci0000:80", PCIPath: []string{"0000:80:01.0", "0000:81:00.0"}, NUMANode: 0}
	if lvl := discovery.Distance(gpu, nic, sc.NUMANodes()); lvl != discovery.NODE {
		t.Errorf("a NIC on node 0's other host bridge is %s from the GPU, want NODE", lvl)
	}
}

type smiGPU struct {
	bus, uuid, product string
	minor              int
}

// parseSMIQuery reads the fields of nvidia-smi -q this test checks. nvidia-smi
// prints the PCI domain with 8 hex digits (00000000:00:06.0); sysfs with 4.
func parseSMIQuery(t *testing.T, path string) []smiGPU {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var gpus []smiGPU
	field := regexp.MustCompile(`^\s*([A-Za-z ]+?)\s+: (.*)$`)
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "GPU ") {
			gpus = append(gpus, smiGPU{minor: -1})
			continue
		}
		m := field.FindStringSubmatch(s.Text())
		if m == nil || len(gpus) == 0 {
			continue
		}
		g := &gpus[len(gpus)-1]
		switch m[1] {
		case "Product Name":
			g.product = m[2]
		case "GPU UUID":
			g.uuid = m[2]
		case "Minor Number":
			n, err := strconv.Atoi(m[2])
			if err != nil {
				t.Fatalf("minor number %q: %v", m[2], err)
			}
			g.minor = n
		case "Bus Id":
			if g.bus == "" { // the first Bus Id of the GPU's PCI section
				g.bus = strings.ToLower(strings.TrimPrefix(m[2], "0000"))
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return gpus
}

// parseTopo counts the GPU and NIC rows of nvidia-smi topo -m's matrix and
// returns each GPU's NUMA affinity column.
func parseTopo(t *testing.T, path string) (rows map[string]int, numa map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 {
		t.Fatal("empty nvidia-smi topo -m")
	}
	header := strings.Split(strings.TrimSpace(lines[0]), "\t")
	numaCol := -1
	for i, h := range header {
		if h == "NUMA Affinity" {
			numaCol = i + 1 // rows start with their own name
		}
	}
	rows, numa = map[string]int{}, map[string]string{}
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "" {
			break // the legend follows the matrix
		}
		cols := strings.Split(l, "\t")
		name := strings.TrimSpace(cols[0])
		switch {
		case strings.HasPrefix(name, "GPU"):
			rows["GPU"]++
			if numaCol > 0 && numaCol < len(cols) {
				numa[name] = strings.TrimSpace(cols[numaCol])
			}
		case strings.HasPrefix(name, "NIC"), strings.HasPrefix(name, "mlx"):
			rows["NIC"]++
		}
	}
	return rows, numa
}
