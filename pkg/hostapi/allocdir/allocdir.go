// Package allocdir owns the layout of the host directory shared by the device
// plugin and the CNI plugin for pools with `binding: gpuAligned`
// (docs/gpu-aligned.md): the pool file the daemon writes, the per-allocation
// directory Allocate creates and the CNI fills, the slot IDs and the
// allocation ID both sides compute from them.
//
// It is names, paths and the pool file's format (poolfile.go, a versioned
// contract: docs/upgrades.md). It does no I/O but the pool file's (and its
// move aside into _quarantine/ when it does not decode), and imports the standard library and internal/ only, so the CNI binary can
// use it without the daemon's dependencies.
package allocdir

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultRoot is the host directory of the daemon's --alloc-dir.
const DefaultRoot = "/var/run/kube-rdma/alloc"

// ContainerRoot is where a container sees its allocation directories:
// ContainerRoot/<pool> is the mount of one allocation directory.
const ContainerRoot = "/var/run/kube-rdma"

// File names in the pool directory and in an allocation directory.
const (
	// PoolFileName is the pool file in <root>/<pool>/, written by the daemon.
	PoolFileName = "pool.json"
	// NCCLConfName, EnvFileName and BindingFileName are the files the CNI
	// writes into an allocation directory.
	NCCLConfName    = "nccl.conf"
	EnvFileName     = "env"
	BindingFileName = "binding.json"
)

// BindingGPUAligned is the pool file's binding (the config's value).
const BindingGPUAligned = "gpuAligned"

// SlotID is the kubelet device ID of slot i of a gpuAligned pool:
// "<pool>-slot-<i>".
func SlotID(pool string, i int) string { return pool + "-slot-" + strconv.Itoa(i) }

// SlotIndex parses a slot ID of pool; false when id is not one.
func SlotIndex(pool, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, pool+"-slot-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// AllocID names one Allocate container request: the first 16 hex digits of
// the sha256 of its slot IDs, sorted, joined with ",". The order of the
// input does not matter; it is not modified.
func AllocID(slotIDs []string) string {
	s := slices.Clone(slotIDs)
	slices.Sort(s)
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(sum[:])[:16]
}

// IsAllocID reports whether name has the form of an allocation ID (16
// lower-case hex digits).
func IsAllocID(name string) bool {
	if len(name) != 16 {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PoolDir is <root>/<pool>.
func PoolDir(root, pool string) string { return filepath.Join(root, pool) }

// PoolFilePath is <root>/<pool>/pool.json.
func PoolFilePath(root, pool string) string { return filepath.Join(root, pool, PoolFileName) }

// AllocPath is the host directory of one allocation: <root>/<pool>/<allocID>.
func AllocPath(root, pool, allocID string) string { return filepath.Join(root, pool, allocID) }

// ContainerPath is where a container sees its allocation directory of pool:
// /var/run/kube-rdma/<pool>.
func ContainerPath(pool string) string { return ContainerRoot + "/" + pool }

// ContainerNCCLConf is NCCL_CONF_FILE's value: /var/run/kube-rdma/<pool>/nccl.conf.
func ContainerNCCLConf(pool string) string { return ContainerPath(pool) + "/" + NCCLConfName }

// ContainerEnvFile is KUBE_RDMA_<POOL>_ENV_FILE's value: /var/run/kube-rdma/<pool>/env.
func ContainerEnvFile(pool string) string { return ContainerPath(pool) + "/" + EnvFileName }

// EnvName is a pool's name as an environment variable stem: upper case,
// anything but letters and digits as "_" (KUBE_RDMA_<stem>_ENV_FILE,
// KUBE_RDMA_<stem>_RDMA_DEVICES). The device plugin's Allocate and the
// CNI's env files both name variables with it.
func EnvName(pool string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(pool) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
