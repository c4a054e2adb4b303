//go:build kuberdma_e2e

package cni

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The local-node e2e's fault hook (its faults phase): the CNI
// plugin killed mid-ADD. Built only with the tag kuberdma_e2e (the e2e's
// own build of the plugin); the shipped binary's park does nothing
// (park_off.go).
//
// When <ParkDir>/park names a step (the name a mark ends, e.g. "move": ADD
// has moved the netdevs into the pod, its record does not say so yet), the
// first process that reaches the step takes the file by renaming it to
// <ParkDir>/parked.<pid> (one process wins the rename) and sleeps there
// until that file is removed or the process is killed.
const (
	ParkDirEnv     = "KUBE_RDMA_E2E_PARK_DIR"
	DefaultParkDir = "/run/kube-rdma-e2e-faulthook"
)

// ParkDir is $KUBE_RDMA_E2E_PARK_DIR, else DefaultParkDir.
func ParkDir() string {
	if d := os.Getenv(ParkDirEnv); d != "" {
		return d
	}
	return DefaultParkDir
}

func park(step string) {
	dir := ParkDir()
	b, err := os.ReadFile(filepath.Join(dir, "park"))
	if err != nil || strings.TrimSpace(string(b)) != step {
		return
	}
	parked := filepath.Join(dir, "parked."+strconv.Itoa(os.Getpid()))
	if err := os.Rename(filepath.Join(dir, "park"), parked); err != nil {
		return // another process took it
	}
	for {
		if _, err := os.Stat(parked); errors.Is(err, fs.ErrNotExist) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const parkBuilt = true
