package cni

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Per-phase timings of one command, for hack/bench-cni.sh. With
// KUBE_RDMA_CNI_TIMINGS=FILE set, Main appends one line to FILE per command:
//
//	ADD start=1.234 main=0.056 parse=0.010 ... (milliseconds)
//
// each phase the time since the previous mark. "start" is the time from
// KUBE_RDMA_CNI_T0 (the caller's clock before it spawned the plugin, as
// bash's $EPOCHREALTIME: seconds with a fraction) to the first mark in
// main, which covers the spawn, exec, Go runtime start-up and package
// initialization; without KUBE_RDMA_CNI_T0 it is left out. Unset, marks
// cost a nil check.
const (
	TimingsEnv = "KUBE_RDMA_CNI_TIMINGS"
	TimingsT0  = "KUBE_RDMA_CNI_T0"
)

type timings struct {
	path  string
	t0    time.Time
	last  time.Time
	names []string
	durs  []time.Duration
}

var phases *timings

// StartTimings begins recording when TimingsEnv is set; main calls it
// first thing.
func StartTimings() {
	path := os.Getenv(TimingsEnv)
	if path == "" {
		return
	}
	now := time.Now()
	t := &timings{path: path, last: now}
	if s := os.Getenv(TimingsT0); s != "" {
		if t0, ok := parseEpoch(s); ok {
			t.t0 = t0
			t.names = append(t.names, "start")
			t.durs = append(t.durs, now.Sub(t0))
		}
	}
	phases = t
}

// parseEpoch reads "seconds[.fraction]" since the epoch.
func parseEpoch(s string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(s, ".")
	sec = strings.TrimSpace(sec)
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(n, ns), true
}

// mark ends the phase called name.
func mark(name string) {
	park(name) // the e2e build's fault hook (park_e2e.go); nothing otherwise
	if phases == nil {
		return
	}
	now := time.Now()
	phases.names = append(phases.names, name)
	phases.durs = append(phases.durs, now.Sub(phases.last))
	phases.last = now
}

// writeTimings appends the command's line to the timings file.
func writeTimings(command string) {
	if phases == nil {
		return
	}
	var b strings.Builder
	b.WriteString(command)
	for i, n := range phases.names {
		fmt.Fprintf(&b, " %s=%.3f", n, float64(phases.durs[i].Microseconds())/1000)
	}
	b.WriteByte('\n')
	f, err := os.OpenFile(phases.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	// Timings are a debugging aid: a failed append loses one line.
	_, _ = f.WriteString(b.String())
	_ = f.Close()
}
