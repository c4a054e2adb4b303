package dra_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// recorder is a Publish that records the state each call published and
// when, and fails while fail says so.
type recorder struct {
	mu    sync.Mutex
	state int
	calls []int
	at    []time.Time
	fail  int // the next fail calls fail
}

func (r *recorder) set(s int) { r.mu.Lock(); r.state = s; r.mu.Unlock() }

func (r *recorder) publish(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, r.state)
	r.at = append(r.at, time.Now())
	if r.fail > 0 {
		r.fail--
		return errors.New("api server away")
	}
	return nil
}

func (r *recorder) waitCalls(t *testing.T, n int, within time.Duration) ([]int, []time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r.mu.Lock()
		calls, at := append([]int(nil), r.calls...), append([]time.Time(nil), r.at...)
		r.mu.Unlock()
		if len(calls) >= n {
			return calls, at
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls after %s, want %d: %v", len(calls), within, n, calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startPacer(t *testing.T, interval time.Duration, r *recorder) *dra.Pacer {
	t.Helper()
	p := dra.NewPacer(interval, r.publish)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// TestPacerCoalesces: a port that flaps every few milliseconds costs one
// publication at once and one at the end of the interval, with the last
// state; make scale measured one slice write per flap before the pacer.
func TestPacerCoalesces(t *testing.T) {
	const interval = 300 * time.Millisecond
	r := &recorder{}
	p := startPacer(t, interval, r)
	start := time.Now()
	r.set(1)
	p.Kick()
	_, at := r.waitCalls(t, 1, time.Second)
	if d := at[0].Sub(start); d > interval/2 {
		t.Errorf("first publication after %s: want it at once", d)
	}
	for s := 2; s <= 21; s++ {
		r.set(s)
		p.Kick()
		time.Sleep(5 * time.Millisecond)
	}
	_, at = r.waitCalls(t, 2, 2*time.Second)
	if d := at[1].Sub(at[0]); d < interval {
		t.Errorf("second publication %s after the first, want at least %s", d, interval)
	}
	// Nothing more is due: two more intervals pass without a call.
	time.Sleep(2 * interval)
	calls, _ := r.waitCalls(t, 2, 0)
	if diff := cmp.Diff([]int{1, 21}, calls); diff != "" {
		t.Errorf("published states (-want +got):\n%s", diff)
	}
}

// TestPacerRetries: a failed publication is tried again without a kick
// (after the backoff), and at a kick no later than the interval.
func TestPacerRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		kick bool
		// the second call comes within [min, max) of the first
		min, max time.Duration
	}{
		{name: "backoff", kick: false, min: time.Second, max: 3 * time.Second},
		{name: "kick", kick: true, min: 100 * time.Millisecond, max: 900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{fail: 1}
			p := startPacer(t, 100*time.Millisecond, r)
			r.set(1)
			p.Kick()
			r.waitCalls(t, 1, time.Second)
			if tc.kick {
				r.set(2)
				p.Kick()
			}
			calls, at := r.waitCalls(t, 2, 5*time.Second)
			if d := at[1].Sub(at[0]); d < tc.min || d >= tc.max {
				t.Errorf("second call %s after the first, want in [%s, %s)", d, tc.min, tc.max)
			}
			want := []int{1, 1}
			if tc.kick {
				want = []int{1, 2}
			}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("published states (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPacerUrgent: an urgent kick inside a pacing window is published at
// once, a second one within the interval waits for the window's end with
// the kicks around it, and an urgent kick after a failed call waits as any
// kick does (no hammering an API server that is away).
func TestPacerUrgent(t *testing.T) {
	const interval = 400 * time.Millisecond
	t.Run("skips the window once", func(t *testing.T) {
		r := &recorder{}
		p := startPacer(t, interval, r)
		r.set(1)
		p.Kick()
		r.waitCalls(t, 1, time.Second)
		r.set(2)
		p.Kick() // paced: the window's end
		time.Sleep(20 * time.Millisecond)
		r.set(3)
		kicked := time.Now()
		p.Urgent()
		_, at := r.waitCalls(t, 2, time.Second)
		if d := at[1].Sub(kicked); d > interval/4 {
			t.Errorf("urgent call %s after its kick, %s after the call before: want it at once", d, at[1].Sub(at[0]))
		}
		r.set(4)
		p.Urgent() // within the interval of the last urgent call: paced
		_, at = r.waitCalls(t, 3, 2*time.Second)
		if d := at[2].Sub(at[1]); d < interval {
			t.Errorf("second urgent call %s after the first, want at least %s", d, interval)
		}
		time.Sleep(2 * interval)
		calls, _ := r.waitCalls(t, 3, 0)
		if diff := cmp.Diff([]int{1, 3, 4}, calls); diff != "" {
			t.Errorf("published states (-want +got):\n%s", diff)
		}
	})
	t.Run("waits after a failure", func(t *testing.T) {
		r := &recorder{fail: 1}
		p := startPacer(t, interval, r)
		r.set(1)
		p.Kick()
		r.waitCalls(t, 1, time.Second)
		r.set(2)
		p.Urgent()
		calls, at := r.waitCalls(t, 2, 5*time.Second)
		if d := at[1].Sub(at[0]); d < interval {
			t.Errorf("urgent call %s after a failed one, want at least %s", d, interval)
		}
		if diff := cmp.Diff([]int{1, 2}, calls); diff != "" {
			t.Errorf("published states (-want +got):\n%s", diff)
		}
	})
}
