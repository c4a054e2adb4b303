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
// after a quiet Interval publishes at once, the kicks within an Interval
// after a publication coalesce into one call at its end, which publishes the
// latest state (Publish reads it when called). An Urgent kick (a device
// turned unhealthy: its taint must reach the scheduler) does not wait for
// the interval's end, unless an urgent call already went out within the last
// Interval: a port going down is tainted at once even when another change of
// the node (its netdev's state or GIDs, which can come a moment before the
// port's state) was published just before it, and a port flapping faster
// still costs at most one call per Interval (its downs and ups alternate
// between the urgent and the paced call: their states coalesce), any mix of
// changes at most two. A failed call is tried again after a backoff (1 s
// doubling to MaxBackoff, at least Interval) or at the next kick, whichever
// comes first, but never sooner than Interval after the last call, urgent or
// not.
type Pacer struct {
	Interval   time.Duration
	MaxBackoff time.Duration
	// Publish publishes the latest state; Result, when set, hears each
	// call's error.
	Publish func(ctx context.Context) error
	Result  func(err error)
	// Now defaults to time.Now.
	Now func() time.Time

	kick, urgent chan struct{}
}

// NewPacer returns a pacer of publish with the defaults.
func NewPacer(interval time.Duration, publish func(ctx context.Context) error) *Pacer {
	return &Pacer{Interval: interval, Publish: publish, kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
}

// Kick asks for a publication; it never blocks (one pending kick is enough:
// the call publishes the latest state).
func (p *Pacer) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Urgent asks for a publication that skips the wait for the interval's end
// (at most one such call per Interval); it never blocks.
func (p *Pacer) Urgent() {
	select {
	case p.urgent <- struct{}{}:
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
	var lastUrgent time.Time    // the last call that skipped the wait
	kicked, urgent, failed := false, false, false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			kicked = true
		case <-p.urgent:
			kicked, urgent = true, true
		case <-timer.C:
		}
		if !kicked && !failed {
			continue
		}
		due := next
		if !kicked {
			due = retryAt
		}
		skip := false
		if t := now(); t.Before(due) {
			// An urgent kick skips the wait after a call that went through, once
			// per Interval.
			if skip = urgent && !failed && (lastUrgent.IsZero() || t.Sub(lastUrgent) >= p.Interval); !skip {
				timer.Reset(due.Sub(t)) // Go 1.23 timers: no stale tick to drain
				continue
			}
		}
		kicked, urgent = false, false
		err := p.Publish(ctx)
		t := now()
		if skip {
			lastUrgent = t
		}
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
