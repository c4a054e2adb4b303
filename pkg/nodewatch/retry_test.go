package nodewatch

import (
	"testing"
	"time"
)

// TestRetryIsBoundedByTime: retries back off within the budget however
// often they are asked about, then go on slowly, never stop.
func TestRetryIsBoundedByTime(t *testing.T) {
	t0 := time.Unix(0, 0)
	r := newRetry(t0)
	// Many checks before the first attempt is due use nothing up.
	for i := range 1000 {
		if r.due(t0.Add(time.Duration(i) * 50 * time.Microsecond)) {
			t.Fatalf("due %d checks in, before retryFirst", i)
		}
	}
	now := t0
	var waits []time.Duration
	for now.Sub(t0) < 2*retryBudget {
		now = r.next
		if !r.due(now) {
			t.Fatal("not due at its next time")
		}
		r.schedule(now)
		waits = append(waits, r.wait)
	}
	if waits[0] != 2*retryFirst || waits[len(waits)-1] != retrySlow {
		t.Errorf("waits %v: want backoff from %s to %s, then %s", waits, 2*retryFirst, retryMax, retrySlow)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] {
			t.Errorf("wait %d (%s) shorter than the one before (%s)", i, waits[i], waits[i-1])
		}
	}
}
