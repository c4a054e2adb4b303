package rdma

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetryDump(t *testing.T) {
	calls := 0
	v, err := retryDump(func() (int, error) {
		calls++
		if calls < 3 {
			return -1, fmt.Errorf("dump links: %w", netlink.ErrDumpInterrupted)
		}
		return 42, nil
	})
	if err != nil || v != 42 || calls != 3 {
		t.Errorf("got %d, %v after %d calls; want 42, nil after 3", v, err, calls)
	}

	calls = 0
	_, err = retryDump(func() (int, error) { calls++; return 0, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != dumpAttempts {
		t.Errorf("always interrupted: %v after %d calls; want ErrDumpInterrupted after %d", err, calls, dumpAttempts)
	}

	other := errors.New("permission denied")
	calls = 0
	_, err = retryDump(func() (int, error) { calls++; return 0, other })
	if !errors.Is(err, other) || calls != 1 {
		t.Errorf("other error: %v after %d calls; want it at once", err, calls)
	}
}
