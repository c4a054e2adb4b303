package rdma

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// dumpAttempts bounds how often a netlink dump is retried. The kernel flags a
// dump NLM_F_DUMP_INTR when the table changed while it was being read (links
// or addresses added or removed meanwhile, e.g. other pods' veth pairs);
// vishvananda/netlink then returns the partial result with
// netlink.ErrDumpInterrupted. A fresh dump is consistent unless the table
// changes again during it, so a few attempts are enough on a busy node.
const dumpAttempts = 5

// retryDump runs dump until it is not interrupted, at most dumpAttempts
// times; the last error (still ErrDumpInterrupted then) is returned with the
// last partial result.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpAttempts {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
