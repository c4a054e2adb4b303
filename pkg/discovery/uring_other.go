//go:build !linux

package discovery

import "errors"

// ring batches attribute reads with io_uring on Linux; elsewhere there is
// none and attributes are read one by one.
type ring struct{}

func newRing() (*ring, error)                                 { return nil, errors.New("io_uring is Linux only") }
func (r *ring) close()                                        {}
func (r *ring) readAll([]attrReq)                             {}
func (r *ring) listDirs(*attrCache, []attrReq)                {}
func (r *ring) preadStates([]stateFile, []byte, []int32) bool { return false }
