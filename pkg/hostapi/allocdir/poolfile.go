package allocdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// PoolFileVersion is the pool file format this binary writes. Version 1
// had no "version" key; version 2 is version 1 plus the key, so a reader
// of version 1 reads it too.
const PoolFileVersion = 2

var poolFormat = contractver.Format{Kind: "pool file", Key: "version", First: 1, Current: PoolFileVersion, Unversioned: 1}

// PoolFile is <root>/<pool>/pool.json: what the CNI knows of a gpuAligned
// pool. Members and Healthy are RDMA device names, sorted. The daemon
// writes it, the CNI reads it: ReadPoolFile follows internal/contractver
// (it reads PoolFileVersion and the one before; a newer file is an error
// wrapping contractver.ErrNewer).
type PoolFile struct {
	Pool     string   `json:"pool"`
	Resource string   `json:"resource"`
	Binding  string   `json:"binding"`
	Members  []string `json:"members"`
	Healthy  []string `json:"healthy"`
	// NoNCCL: the pool does not set NCCL's variables (config nccl: false),
	// so the CNI writes none into nccl.conf and the env file. Absent in
	// version 1 files, whose pools all set them.
	NoNCCL bool `json:"noNCCL,omitempty"`
}

// poolFileJSON is the file as stored: the version, then the pool's keys.
type poolFileJSON struct {
	Version int `json:"version"`
	PoolFile
}

// Marshal encodes the file as the daemon writes it (PoolFileVersion,
// indented, ending in a newline).
func (p PoolFile) Marshal() ([]byte, error) {
	if p.Members == nil {
		p.Members = []string{}
	}
	if p.Healthy == nil {
		p.Healthy = []string{}
	}
	b, err := json.MarshalIndent(poolFileJSON{Version: PoolFileVersion, PoolFile: p}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode pool file of %s: %w", p.Pool, err)
	}
	return append(b, '\n'), nil
}

// WritePoolFile replaces <root>/<pool>/pool.json with data (Marshal's)
// atomically and durably, creating the pool directory with mode 0755
// whatever the umask (the CNI and containers read it).
func WritePoolFile(root, pool string, data []byte) error {
	dir := PoolDir(root, pool)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write pool file: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("write pool file: %w", err)
	}
	if err := atomicfile.WriteSynced(PoolFilePath(root, pool), 0o644, ".kube-rdma-*.tmp", atomicfile.Bytes(data)); err != nil {
		return fmt.Errorf("write pool file: %w", err)
	}
	return nil
}

// RemovePoolFile removes <root>/<pool>/pool.json; one that is not there
// is fine.
func RemovePoolFile(root, pool string) error {
	if err := os.Remove(PoolFilePath(root, pool)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pool file: %w", err)
	}
	return nil
}

// ReadPoolFile reads <root>/<pool>/pool.json. A missing file wraps
// fs.ErrNotExist (the daemon has not served the pool on this node); one
// of a version this binary does not read wraps contractver.ErrNewer (or
// ErrOlder).
func ReadPoolFile(root, pool string) (PoolFile, error) {
	path := PoolFilePath(root, pool)
	b, err := os.ReadFile(path)
	if err != nil {
		return PoolFile{}, fmt.Errorf("read pool file: %w", err)
	}
	if _, err := poolFormat.Check(path, b); err != nil {
		return PoolFile{}, err
	}
	var f poolFileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return PoolFile{}, fmt.Errorf("decode pool file %s: %w", path, err)
	}
	if f.Pool != pool {
		return f.PoolFile, fmt.Errorf("pool file %s names pool %q", path, f.Pool)
	}
	return f.PoolFile, nil
}
