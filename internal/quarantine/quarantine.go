// Package quarantine moves a contract file that does not decode (torn by a
// crash of the machine, truncated, not a record at all) out of its readers'
// way, into a directory of its own, keeping its bytes for whoever looks
// into it: the one home of that step for the readers of pkg/hostapi/....
//
// A moved file costs only its own pod, claim or pool: the readers go on
// with the others. A file of a version the reader does not read is not
// damaged (internal/contractver refuses it by name) and is never moved here.
//
// It decodes nothing and does no logging: the readers return a Damaged,
// their callers log it. The file is gone from its place once moved, so the
// next read does not see it again: it is logged once.
package quarantine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ErrDamaged marks a contract file that did not decode (Damaged wraps it).
var ErrDamaged = errors.New("contract file does not decode")

// Damaged is a file that did not decode: the reader moved it from Path to
// Moved ("" when it could not be moved, say on a read-only mount; Err then
// says why too). As an error it wraps ErrDamaged and Err.
type Damaged struct {
	Path  string
	Moved string
	Err   error
}

func (d *Damaged) Error() string {
	if d.Moved == "" {
		return fmt.Sprintf("%s: %v (not moved aside)", d.Path, d.Err)
	}
	return fmt.Sprintf("%s: %v (moved aside to %s)", d.Path, d.Err, d.Moved)
}

// Unwrap returns ErrDamaged and the cause.
func (d *Damaged) Unwrap() []error { return []error{ErrDamaged, d.Err} }

// timeFormat is the suffix Move gives a file: when it was moved, UTC.
const timeFormat = "20060102T150405Z"

// Move moves path into dir (created with mode 0700) as name, then "." and
// the time now, UTC ("torn.json.20260102T150405Z"; ".1", ".2"... after it
// when that name is taken: an earlier file is never replaced). The move is
// not fsynced: after a crash of the machine the file may be back in its
// place, where the next read moves it again. read is what the caller read at path (os.Stat or
// f.Stat of it); nil skips the check. A file at path that is not that one
// any more (replaced by a writer's rename meanwhile) is left in place.
// cause is why it is damaged; the Damaged returned says where it went, or
// why it could not be moved.
func Move(path, dir, name string, read os.FileInfo, now time.Time, cause error) Damaged {
	d := Damaged{Path: path, Err: cause}
	fail := func(err error) Damaged {
		d.Err = errors.Join(cause, fmt.Errorf("move aside: %w", err))
		return d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	if read != nil {
		cur, err := os.Lstat(path)
		if err != nil {
			return fail(err)
		}
		if !os.SameFile(cur, read) {
			return fail(errors.New("replaced while it was read"))
		}
	}
	base := name + "." + now.UTC().Format(timeFormat)
	to := filepath.Join(dir, base)
	for i := 1; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = filepath.Join(dir, fmt.Sprintf("%s.%d", base, i))
	}
	if err := os.Rename(path, to); err != nil {
		return fail(err)
	}
	d.Moved = to
	return d
}

// ReadFile is os.ReadFile that also returns the file read, for Move.
func ReadFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	return data, fi, nil
}

// Count is the number of files in dir; 0 when it does not exist.
func Count(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() {
			n++
		}
	}
	return n, nil
}
