package dra

import (
	"context"
	"time"
)

// DefaultPublishInterval is the least time between two publications of the
// ResourceSlices (DriverConfig.PublishInterval), the RDMANodeState
// publisher's interval (nodestate.DefaultInterval). A port that flaps faster
// than the node watcher's poll sees it (500 ms) would otherwise cost the API
// server a slice update per poll, 120 a minute, each one a watch event for
// every scheduler: make scale measured one write per flap before the pacing
// (docs/scale.md).
const DefaultPublishInterval = 2 * time.Second

// Pacer calls Publish when kicked, at most once per Interval: the first kick
// after a quiet Interval publishes at once (a port that goes down is tainted
// without delay), the kicks within an Interval after a publication coalesce
// into one call at its end, which publishes the latest state (Publish reads
// it when called). A failed call is tried again after a backoff (1 s
// doubling to MaxBackoff, at least Interval) or at the next kick, whichever
// comes first, but never sooner than Interval after the last call.
type Pacer struct {
	Interval   time.Duration
	MaxBackoff time.Duration
	// Publish publishes the latest state; Result, when set, hears each
	// call's error.
	Publish func(ctx context.Context) error
	Result  func(err error)
	// Now defaults to time.Now.
	Now func() time.Time

	kick chan struct{}
}

// NewPacer returns a pacer of publish with the defaults.
func NewPacer(interval time.Duration, publish func(ctx context.Context) error) *Pacer {
	return &Pacer{Interval: interval, Publish: publish, kick: make(chan struct{}, 1)}
}

// Kick asks for a publication; it never blocks (one pending kick is enough:
// the call publishes the latest state).
func (p *Pacer) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run paces until ctx ends.
func (p *Pacer) Run(ctx context.Context) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	maxBackoff := p.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	backoff := time.Second
	var next, retryAt time.Time // no call before next; a failed one again at retryAt
	kicked, failed := false, false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			kicked = true
		case <-timer.C:
		}
		if !kicked && !failed {
			continue
		}
		due := next
		if !kicked {
			due = retryAt
		}
		if t := now(); t.Before(due) {
			timer.Reset(due.Sub(t)) // Go 1.23 timers: no stale tick to drain
			continue
		}
		kicked = false
		err := p.Publish(ctx)
		t := now()
		next = t.Add(p.Interval)
		if p.Result != nil {
			p.Result(err)
		}
		failed = err != nil
		if !failed {
			backoff = time.Second
			continue
		}
		retryAt = t.Add(max(backoff, p.Interval))
		backoff = min(2*backoff, maxBackoff)
		timer.Reset(retryAt.Sub(t))
	}
}
