// Package memlockhook gives the containers of a pool their locked-memory
// limit without NRI: an OCI createRuntime hook in the pool's CDI spec, which
// the runtime (runc, crun; through containerd or CRI-O with CDI on) runs for
// every container that gets one of the pool's devices, after it created the
// container's first process and before that process runs the workload. The
// hook raises that process's RLIMIT_MEMLOCK (prlimit on the pid in the OCI
// state on its stdin); the workload and everything it starts inherit it.
//
// What it does not reach: processes started later by `kubectl exec` (the
// runtime starts those from the container's spec, which a hook cannot
// change; the NRI plugin sets the limit in the spec and covers them). The
// runtime applies the spec's own RLIMIT_MEMLOCK, when it has one (NRI's),
// after the hook, so with NRI on its value is the one that holds.
//
// The package owns the hook's CDI entry, its installation on the host and
// the prlimit call; it does not choose devices or read the pool config.
package memlockhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// Command is the argument of the kube-rdma binary that runs the hook.
const Command = "memlock-hook"

// Unlimited is RLIM_INFINITY.
const Unlimited uint64 = math.MaxUint64

// FilePrefix starts the name of every hook binary Install writes.
const FilePrefix = "kube-rdma-hook-"

// CDIHook is the createRuntime hook that raises RLIMIT_MEMLOCK to limit,
// run from the binary at path (a host path).
func CDIHook(path string, limit uint64) *cdispec.Hook {
	return &cdispec.Hook{HookName: "createRuntime", Path: path,
		Args: []string{filepath.Base(path), Command, "--limit", FormatLimit(limit)}}
}

// FormatLimit writes a limit as the hook's --limit takes it.
func FormatLimit(limit uint64) string {
	if limit == Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(limit, 10)
}

// ParseLimit reads --limit: "unlimited" or a positive number of bytes.
func ParseLimit(s string) (uint64, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("--limit %q: want \"unlimited\" or a positive number of bytes", s)
	}
	return v, nil
}

// hookState is the part of the OCI state (runtime-spec, "State") the hooks
// read: the container's first process (in the runtime's PID namespace),
// its bundle and the annotations of its spec.
type hookState struct {
	Pid         int               `json:"pid"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
}

// readState decodes the OCI state a runtime writes on a hook's stdin.
func readState(stdin io.Reader) (hookState, error) {
	var st hookState
	if err := json.NewDecoder(stdin).Decode(&st); err != nil {
		return hookState{}, fmt.Errorf("read the OCI state on stdin: %w", err)
	}
	return st, nil
}

// Run is the hook: the OCI state on stdin, the limit to raise to. It
// returns what it did, for the runtime's log when it fails.
func Run(stdin io.Reader, limit uint64) (Change, error) {
	st, err := readState(stdin)
	if err != nil {
		return Change{}, err
	}
	if st.Pid <= 0 {
		return Change{}, fmt.Errorf("the OCI state on stdin has no pid (%d): run the hook as a createRuntime hook", st.Pid)
	}
	return Raise(st.Pid, limit)
}

// Change is a process's RLIMIT_MEMLOCK before and after Raise.
type Change struct {
	Pid         int
	Before, Now unix.Rlimit
}

// Raise sets pid's RLIMIT_MEMLOCK soft and hard limits to at least limit;
// a limit already higher stays. Raising a hard limit needs CAP_SYS_RESOURCE
// (the runtime runs hooks as root).
func Raise(pid int, limit uint64) (Change, error) {
	c := Change{Pid: pid}
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &c.Before); err != nil {
		return c, fmt.Errorf("read RLIMIT_MEMLOCK of pid %d: %w", pid, err)
	}
	c.Now = unix.Rlimit{Cur: max(c.Before.Cur, limit), Max: max(c.Before.Max, limit)}
	if c.Now == c.Before {
		return c, nil
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, &c.Now, nil); err != nil {
		if errors.Is(err, unix.EPERM) {
			return c, fmt.Errorf("raise RLIMIT_MEMLOCK of pid %d from %s to %s: %w (raising a hard limit needs CAP_SYS_RESOURCE)",
				pid, FormatLimit(c.Before.Max), FormatLimit(limit), err)
		}
		return c, fmt.Errorf("raise RLIMIT_MEMLOCK of pid %d to %s: %w", pid, FormatLimit(limit), err)
	}
	return c, nil
}

// Install puts the binary at src into dir (a host directory the runtime
// reads) under a name made of its content's hash, and returns that path.
// The name changes with the content, so a runtime running the hook while a
// newer daemon installs its own never sees a half-written file, and an
// older daemon's specs keep naming the binary they were written for.
func Install(src, dir string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("open the hook binary: %w", err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read the hook binary %s: %w", src, err)
	}
	path := filepath.Join(dir, FilePrefix+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o100 != 0 {
		if st, err := f.Stat(); err == nil && st.Size() == fi.Size() {
			return path, nil
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("read the hook binary %s: %w", src, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the hook directory: %w", err)
	}
	if err := atomicfile.WriteSynced(path, 0o755, "."+FilePrefix+"*.tmp", func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}); err != nil {
		return "", fmt.Errorf("install the hook binary: %w", err)
	}
	return path, nil
}

// RemoveUnused removes the hook binaries in dir that no file in cdiDir
// names: a daemon that removed its specs at exit or uninstall leaves no
// binary behind, and one whose specs another daemon still serves keeps it.
func RemoveUnused(dir, cdiDir string) error {
	bins, err := filepath.Glob(filepath.Join(dir, FilePrefix+"*"))
	if err != nil || len(bins) == 0 {
		return err
	}
	specs, err := os.ReadDir(cdiDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read the CDI directory: %w", err)
	}
	var named strings.Builder
	for _, e := range specs {
		if e.Type().IsRegular() {
			if b, err := os.ReadFile(filepath.Join(cdiDir, e.Name())); err == nil {
				named.Write(b)
			}
		}
	}
	var errs []error
	for _, b := range bins {
		if strings.HasPrefix(filepath.Base(b), ".") || strings.Contains(named.String(), `"`+b+`"`) {
			continue
		}
		if err := os.Remove(b); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
