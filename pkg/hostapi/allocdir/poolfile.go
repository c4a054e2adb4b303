package allocdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
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

// QuarantineDir is the directory under the root where readers move the
// files that do not decode: a pool file as <pool>.pool.json.<time>, the
// node's pools file (package nodepools, in the same directory) as
// _pools.json.<time>. A pool name begins with a letter or a digit, so no
// pool has this name.
const QuarantineDir = "_quarantine"

// ReadPoolFile reads <root>/<pool>/pool.json. A missing file wraps
// fs.ErrNotExist (the daemon has not served the pool on this node); one
// of a version this binary does not read wraps contractver.ErrNewer (or
// ErrOlder). One that does not decode (torn, truncated, not a pool file)
// is moved to <root>/_quarantine/ with its bytes: the error is a
// *quarantine.Damaged (the caller logs it) that wraps fs.ErrNotExist too,
// since the file is gone; the daemon writes it again (docs/gpu-aligned.md).
func ReadPoolFile(root, pool string) (PoolFile, error) {
	path := PoolFilePath(root, pool)
	b, read, err := quarantine.ReadFile(path)
	if err != nil {
		return PoolFile{}, fmt.Errorf("read pool file: %w", err)
	}
	var verr *contractver.VersionError
	if _, err := poolFormat.Check(path, b); errors.As(err, &verr) {
		return PoolFile{}, err
	} else if err != nil {
		return PoolFile{}, moveAside(root, pool, read, err)
	}
	var f poolFileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return PoolFile{}, moveAside(root, pool, read, fmt.Errorf("decode pool file %s: %w", path, err))
	}
	if f.Pool != pool {
		return f.PoolFile, fmt.Errorf("pool file %s names pool %q", path, f.Pool)
	}
	return f.PoolFile, nil
}

func moveAside(root, pool string, read os.FileInfo, cause error) error {
	d := quarantine.Move(PoolFilePath(root, pool), filepath.Join(root, QuarantineDir), pool+"."+PoolFileName, read, time.Now(), cause)
	return fmt.Errorf("%w: %w", &d, fs.ErrNotExist)
}
