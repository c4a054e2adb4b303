package discovery

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CounterSources are the per-port counter directories, in the order
// ReadPortCounters reads them: the IB-standard counters and the driver's
// hw_counters.
var CounterSources = []string{"counters", "hw_counters"}

// ReadPortCounters calls fn for every numeric file of a port's counters/
// and hw_counters/ directories, in directory order. Files that cannot be
// read or parsed are skipped: a counter is best effort, never an error.
func ReadPortCounters(sysRoot, dev string, port int, fn func(source, name string, value float64)) {
	ps := strconv.Itoa(port)
	for _, src := range CounterSources {
		dir := filepath.Join(sysRoot, "class/infiniband", dev, "ports", ps, src)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
			if err != nil {
				continue
			}
			fn(src, e.Name(), v)
		}
	}
}
