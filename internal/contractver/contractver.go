// Package contractver is the one version policy of the files kube-rdma's
// processes hand each other on disk (pkg/hostapi/...: attachment records,
// claim records, pool files). Each format has a current version, which its
// writers write; its readers accept the current version and the one before
// it, so a node where one side is already upgraded and the other not yet
// keeps working. A file of a newer version is refused with an error that
// names the file, the version found, the versions this binary reads and
// what to do; it wraps ErrNewer. A file older than the previous version
// wraps ErrOlder.
//
// A format whose current version is its first has no previous version: its
// readers accept that one only.
//
// It decodes nothing but the version key, writes nothing and does no
// logging.
package contractver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

var (
	// ErrNewer marks a file written by a newer kube-rdma than this one.
	ErrNewer = errors.New("contract file of a newer version")
	// ErrOlder marks a file older than the previous version.
	ErrOlder = errors.New("contract file of an unsupported older version")
)

// Remedy is what to do about a file of another version: the CNI plugin and
// the agent are two binaries of one release, and every contract is written
// by one and read by the other.
const Remedy = "finish the upgrade of the CNI plugin and the agent, or roll both back together"

// Format is one on-disk format's versions.
type Format struct {
	// Kind names the file in errors ("attachment record").
	Kind string
	// Key is the JSON key of the version ("schema", "version").
	Key string
	// First is the format's first version: readers accept Current and
	// Current-1, but nothing before First.
	First int
	// Current is the version this binary writes.
	Current int
	// Unversioned is the version of a file without Key (written before
	// the format had one); 0 when such a file is refused.
	Unversioned int
}

// Reads are the versions readers accept, newest first.
func (f Format) Reads() []int {
	if f.Current > f.First {
		return []int{f.Current, f.Current - 1}
	}
	return []int{f.Current}
}

// Check returns the version of the file at path (for errors only) holding
// data, or an error: a *VersionError wrapping ErrNewer or ErrOlder, or
// one of decoding (data is not a JSON object, or its version is not an
// integer).
func (f Format) Check(path string, data []byte) (int, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return 0, fmt.Errorf("decode %s %s: %w", f.Kind, path, err)
	}
	v := f.Unversioned
	if raw, ok := obj[f.Key]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("decode %s %s: %q: %w", f.Kind, path, f.Key, err)
		}
	}
	reads := f.Reads()
	switch {
	case v > reads[0]:
		return v, &VersionError{Kind: f.Kind, Path: path, Found: v, Reads: reads, err: ErrNewer}
	case v < reads[len(reads)-1]:
		return v, &VersionError{Kind: f.Kind, Path: path, Found: v, Reads: reads, err: ErrOlder}
	}
	return v, nil
}

// VersionError is a file of a version this binary does not read.
type VersionError struct {
	Kind, Path string
	Found      int
	Reads      []int // newest first
	err        error // ErrNewer or ErrOlder
}

func (e *VersionError) Error() string {
	how := "newer"
	if e.err == ErrOlder {
		how = "older"
	}
	reads := ""
	for i, v := range e.Reads {
		if i > 0 {
			reads += " and "
		}
		reads += strconv.Itoa(v)
	}
	return fmt.Sprintf("%s %s: version %d is %s than this kube-rdma reads (%s): %s", e.Kind, e.Path, e.Found, how, reads, Remedy)
}

// Unwrap returns ErrNewer or ErrOlder.
func (e *VersionError) Unwrap() error { return e.err }
