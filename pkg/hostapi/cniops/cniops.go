// Package cniops is the CNI plugin's operations spool: one small record per
// ADD, DEL, CHECK, GC or STATUS (command, pool, CNI error code, duration)
// that the short-lived plugin leaves for the node agent, which exports them
// as Prometheus series (kube_rdma_cni_operations_total,
// kube_rdma_cni_operation_duration_seconds) and removes them.
//
// The spool is the directory Dir(<CNI state dir>) (the daemon's
// --cni-metrics-dir). The plugin appends one JSON line per command to
// FileName with a single O_APPEND write: no fsync, because a record is a
// metric, not state, and the command's cost counts (make bench-cni). A line
// is never longer than MaxLine bytes. When FileName has reached MaxBytes the
// writer first renames it to OldName, dropping the OldName before it (the
// oldest records): a daemon that is stopped never lets the spool grow past
// about 2*MaxBytes plus the two files Drain took and has not read yet.
//
// Torn lines: a write cut short (the plugin killed mid-write, a full disk)
// leaves a line without its newline, and the next record is appended to it.
// The reader parses each newline-terminated line on its own and counts a
// line that does not parse as Malformed; a last line without a newline is
// Malformed too. A torn write costs that record and at most the next one.
//
// Each line carries its version under "v" (internal/contractver): the reader
// accepts Version (the first, so only it for now) and counts a newer one as
// Newer, with the error that names it. It imports the standard library and
// internal/ only, does no I/O but the spool's, and no logging.
package cniops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

const (
	// DirName is the spool's directory in the CNI plugin's state dir.
	DirName = "metrics"
	// FileName is the file the plugin appends to.
	FileName = "ops.jsonl"
	// OldName is FileName once it reached MaxBytes.
	OldName = "ops.old.jsonl"
	// takenSuffix marks a file Drain moved aside, read at its next call.
	takenSuffix = ".taken"
	// MaxBytes is the size past which the writer rotates FileName.
	MaxBytes = 256 << 10
	// MaxLine bounds a record's line (a pool name is cut to MaxPool).
	MaxLine = 160
	// MaxPool is the longest pool name a record carries (a DNS label).
	MaxPool = 63
)

// Version is the record format this binary writes.
const Version = 1

var format = contractver.Format{Kind: "CNI operation record", Key: "v", First: 1, Current: Version}

// Dir is the spool directory of the CNI state dir stateDir.
func Dir(stateDir string) string { return filepath.Join(stateDir, DirName) }

// Record is one command's outcome.
type Record struct {
	// Command is the CNI command: ADD, DEL, CHECK, GC, STATUS.
	Command string
	// Pool is the pool of the netconf's resourceName (after its last "/"),
	// "" when the netconf names none (a Multus deviceID, DRA claims).
	Pool string
	// Code is the CNI error code of the result: 0 for success.
	Code uint
	// Duration is the command's time in the plugin, from main to result.
	Duration time.Duration
}

var commands = map[string]bool{"ADD": true, "DEL": true, "CHECK": true, "GC": true, "STATUS": true}

// ErrInvalid marks a line that is JSON of this version but not a record.
var ErrInvalid = errors.New("invalid CNI operation record")

// Marshal is the record's line, newline included. The pool is cut to
// MaxPool bytes and any byte outside [A-Za-z0-9._-] becomes "_", so the
// line needs no escaping and stays under MaxLine.
func (r Record) Marshal() []byte {
	b := make([]byte, 0, MaxLine)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"cmd":"`...)
	b = appendSafe(b, r.Command, 8)
	b = append(b, `","pool":"`...)
	b = appendSafe(b, r.Pool, MaxPool)
	b = append(b, `","code":`...)
	b = strconv.AppendUint(b, uint64(r.Code), 10)
	b = append(b, `,"us":`...)
	b = strconv.AppendInt(b, max(r.Duration.Microseconds(), 0), 10)
	return append(b, "}\n"...)
}

func appendSafe(b []byte, s string, n int) []byte {
	if len(s) > n {
		s = s[:n]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !safe(c) {
			c = '_'
		}
		b = append(b, c)
	}
	return b
}

func safe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

type recordJSON struct {
	V    int    `json:"v"`
	Cmd  string `json:"cmd"`
	Pool string `json:"pool"`
	Code uint   `json:"code"`
	US   int64  `json:"us"`
}

// Parse reads one line (without its newline). A line of a version this
// binary does not read wraps contractver.ErrNewer (or ErrOlder); one that is
// not a record wraps ErrInvalid or is a decoding error.
func Parse(path string, line []byte) (Record, error) {
	if len(line) > MaxLine {
		return Record{}, fmt.Errorf("%s: %w: line of %d bytes", path, ErrInvalid, len(line))
	}
	if _, err := format.Check(path, line); err != nil {
		return Record{}, err
	}
	var j recordJSON
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Record{}, fmt.Errorf("decode CNI operation record %s: %w", path, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%s: %w: data after the record", path, ErrInvalid)
	}
	if !commands[j.Cmd] {
		return Record{}, fmt.Errorf("%s: %w: command %q", path, ErrInvalid, j.Cmd)
	}
	if len(j.Pool) > MaxPool {
		return Record{}, fmt.Errorf("%s: %w: pool of %d bytes", path, ErrInvalid, len(j.Pool))
	}
	for i := 0; i < len(j.Pool); i++ {
		if !safe(j.Pool[i]) {
			return Record{}, fmt.Errorf("%s: %w: pool %q", path, ErrInvalid, j.Pool)
		}
	}
	if j.US < 0 || j.US > int64(time.Hour/time.Microsecond) {
		return Record{}, fmt.Errorf("%s: %w: duration %dus", path, ErrInvalid, j.US)
	}
	return Record{Command: j.Cmd, Pool: j.Pool, Code: j.Code, Duration: time.Duration(j.US) * time.Microsecond}, nil
}

// Append adds r to the spool dir with one write, creating dir (mode 0700)
// when it is missing and rotating FileName past MaxBytes.
func Append(dir string, r Record) error {
	if err := appendLine(dir, FileName, OldName, r.Marshal()); err != nil {
		return fmt.Errorf("append CNI operation record: %w", err)
	}
	return nil
}

// appendLine adds line to dir/name with one O_APPEND write, creating dir
// (mode 0700) when it is missing and renaming name to old first when it has
// reached MaxBytes.
func appendLine(dir, name, old string, line []byte) error {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o700); err == nil {
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		}
	}
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() >= MaxBytes {
		_ = f.Close()
		// Another plugin may rotate at the same time: one rename wins, the
		// other finds no file (ENOENT) and creates a new one below.
		if err := os.Rename(path, filepath.Join(dir, old)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", name, err)
		}
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return err
		}
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Stats counts the lines of a Drain that were not records.
type Stats struct {
	// Malformed lines: torn writes, garbage, invalid records.
	Malformed int
	// Newer lines: of a version newer than this binary reads.
	Newer int
	// NewerErr is the error of the last Newer line, which names it.
	NewerErr error
}

// Drain hands fn the records of the files that the previous Drain moved
// aside, removes them, and moves FileName and OldName aside for the next
// call. Reading a file only one call after moving it lets a plugin that
// opened it just before the move finish its write into it. A missing dir is
// an empty spool.
func Drain(dir string, fn func(Record)) (Stats, error) {
	var st Stats
	err := drainFiles(dir, []string{OldName, FileName}, func(path string, b []byte) {
		parseAll(path, b, fn, &st)
	})
	if err != nil {
		err = fmt.Errorf("CNI operations spool: %w", err)
	}
	return st, err
}

// drainFiles hands read the content of each of names' files that the
// previous call moved aside (name.taken), removes them, and moves the names
// aside for the next call.
func drainFiles(dir string, names []string, read func(path string, b []byte)) error {
	var errs []error
	for _, name := range names {
		taken := filepath.Join(dir, name+takenSuffix)
		b, err := os.ReadFile(taken)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, fmt.Errorf("read: %w", err))
			continue // keep it, and the file behind it, for the next call
		default:
			read(taken, b)
			if err := os.Remove(taken); err != nil {
				errs = append(errs, fmt.Errorf("remove: %w", err))
			}
		}
		if err := os.Rename(filepath.Join(dir, name), taken); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("take: %w", err))
		}
	}
	return errors.Join(errs...)
}

func parseAll(path string, b []byte, fn func(Record), st *Stats) {
	parseLines(path, b, Parse, fn, st)
}

// parseLines hands fn what parse makes of each newline-terminated line of
// b, and counts the lines it refuses in st.
func parseLines[T any](path string, b []byte, parse func(string, []byte) (T, error), fn func(T), st *Stats) {
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte{'\n'})
		b = rest
		if !ok { // the last line has no newline: a torn write
			st.Malformed++
			return
		}
		if len(line) == 0 {
			continue
		}
		r, err := parse(path, line)
		switch {
		case errors.Is(err, contractver.ErrNewer):
			st.Newer++
			st.NewerErr = err
		case err != nil:
			st.Malformed++
		default:
			fn(r)
		}
	}
}
