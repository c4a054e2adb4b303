package cniops

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// The give-up spool: one line per NIC that a DEL or GC gave up on (its PCI
// function or auxiliary device gone, or its netdev not back from the pod's
// netns within the plugin's bound), so that the daemon reports it where
// operators look (an Event on the pod, its log, a metric) and removes it. It
// lives in the same directory as the operations spool, in its own files,
// written and drained the same way (one O_APPEND write, no fsync, rotated
// past MaxBytes, read one Drain after it was taken). A daemon older than the
// give-up spool leaves its files alone: at most 2*MaxBytes stay.
const (
	// GiveUpFileName is the file the plugin appends give-ups to.
	GiveUpFileName = "gaveup.jsonl"
	// GiveUpOldName is GiveUpFileName once it reached MaxBytes.
	GiveUpOldName = "gaveup.old.jsonl"
	// MaxGiveUpLine bounds a give-up's line; a longer one is not written
	// (Kubernetes names and the kernel's are far shorter).
	MaxGiveUpLine = 2048
)

// GiveUpVersion is the give-up format this binary writes.
const GiveUpVersion = 1

var giveUpFormat = contractver.Format{Kind: "CNI give-up record", Key: "v", First: 1, Current: GiveUpVersion}

// Why a NIC was given up.
const (
	// GiveUpGone: its PCI function (an SF: its auxiliary device) is no
	// longer on the node, so its netdev cannot come back.
	GiveUpGone = "function-gone"
	// GiveUpNotBack: its function is there, but its netdev did not come
	// back from the pod's netns within the plugin's bound.
	GiveUpNotBack = "not-back"
	// GiveUpVanished: its netdev was neither in the pod's netns, still
	// open, nor on the host: the NIC left while the pod had it (a VF or SF
	// deleted, its driver unbound).
	GiveUpVanished = "vanished"
)

// GiveUp is one NIC a DEL or GC gave up on: the attachment ended without it
// (IPAM released, record removed), and the device rejoins its pool when its
// netdev reappears on the host.
type GiveUp struct {
	Time time.Time `json:"time"`
	// Command is DEL, GC or reclaim (the daemon's in-process reclaimer of
	// attachments whose DEL never came).
	Command string `json:"cmd"`
	// ContainerID and IfName are the attachment's.
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// PodNamespace, PodName and PodUID name the pod when the attachment's
	// record did (CNI_ARGS at ADD); "" otherwise.
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	// RDMA, Netdev, PodIfName and Function name the device: its RDMA
	// device, its host netdev when it was attached, its name in the pod, and
	// its PCI function or auxiliary device.
	RDMA      string `json:"rdma"`
	Netdev    string `json:"netdev"`
	PodIfName string `json:"podIfName,omitempty"`
	Function  string `json:"function"`
	// Reason is GiveUpGone, GiveUpNotBack or GiveUpVanished.
	Reason string `json:"reason"`
	// Waited is how long DELs and GCs had waited for it, from the first.
	Waited time.Duration `json:"waitedNs,omitempty"`
}

type giveUpJSON struct {
	V int `json:"v"`
	GiveUp
}

// AppendGiveUp adds g to the give-up spool in dir with one write, creating
// dir (mode 0700) when it is missing and rotating past MaxBytes.
func AppendGiveUp(dir string, g GiveUp) error {
	b, err := json.Marshal(giveUpJSON{V: GiveUpVersion, GiveUp: g})
	if err != nil {
		return fmt.Errorf("append CNI give-up record: %w", err)
	}
	if len(b)+1 > MaxGiveUpLine {
		return fmt.Errorf("append CNI give-up record: %w: %d bytes", ErrInvalid, len(b)+1)
	}
	if err := appendLine(dir, GiveUpFileName, GiveUpOldName, append(b, '\n')); err != nil {
		return fmt.Errorf("append CNI give-up record: %w", err)
	}
	return nil
}

// ParseGiveUp reads one give-up line (without its newline). Unknown fields
// are ignored (a newer plugin's additions to this version); a line of a
// newer version wraps contractver.ErrNewer.
func ParseGiveUp(path string, line []byte) (GiveUp, error) {
	if len(line) > MaxGiveUpLine {
		return GiveUp{}, fmt.Errorf("%s: %w: line of %d bytes", path, ErrInvalid, len(line))
	}
	if _, err := giveUpFormat.Check(path, line); err != nil {
		return GiveUp{}, err
	}
	var j giveUpJSON
	if err := json.Unmarshal(line, &j); err != nil {
		return GiveUp{}, fmt.Errorf("decode CNI give-up record %s: %w", path, err)
	}
	g := j.GiveUp
	if g.Command != "DEL" && g.Command != "GC" && g.Command != "reclaim" || g.RDMA == "" || !slices.Contains([]string{GiveUpGone, GiveUpNotBack, GiveUpVanished}, g.Reason) {
		return GiveUp{}, fmt.Errorf("%s: %w: give-up of %q by %q for %q", path, ErrInvalid, g.RDMA, g.Command, g.Reason)
	}
	return g, nil
}

// DrainGiveUps hands fn the give-ups of the files the previous call moved
// aside, removes them, and moves the spool's give-up files aside for the
// next call, as Drain does with the operations.
func DrainGiveUps(dir string, fn func(GiveUp)) (Stats, error) {
	var st Stats
	err := drainFiles(dir, []string{GiveUpOldName, GiveUpFileName}, func(path string, b []byte) {
		parseLines(path, b, ParseGiveUp, fn, &st)
	})
	if err != nil {
		err = fmt.Errorf("CNI give-up spool: %w", err)
	}
	return st, err
}
