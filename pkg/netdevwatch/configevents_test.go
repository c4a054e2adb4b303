package netdevwatch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
)

// views hands out views one after another, as the agent's View does: the
// current one and a channel closed when the next is set.
type views struct {
	mu      sync.Mutex
	v       agent.View
	changed chan struct{}
	read    chan struct{} // closed when the current view has been read
}

func newViews(problems ...string) *views {
	return &views{v: agent.View{ConfigErrors: problems}, changed: make(chan struct{}), read: make(chan struct{})}
}

func (s *views) View() (agent.View, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.read:
	default:
		close(s.read)
	}
	return s.v, s.changed
}

// set sets the next view and waits until it was read, so that no change
// is coalesced with the next.
func (s *views) set(t *testing.T, problems ...string) {
	t.Helper()
	s.mu.Lock()
	s.v = agent.View{ConfigErrors: problems}
	close(s.changed)
	s.changed, s.read = make(chan struct{}), make(chan struct{})
	read := s.read
	s.mu.Unlock()
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatalf("view %q not read", problems)
	}
}

type nodeEvents struct {
	mu  sync.Mutex
	got []string
}

func (n *nodeEvents) WarnNode(reason, message string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, reason+": "+message)
}

func (n *nodeEvents) wait(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n.mu.Lock()
		got := slices.Clone(n.got)
		n.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node events %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPostConfigProblems: each configuration problem is posted once when it
// appears (at start too), not again while it stays, and again when it comes
// back after it was gone; a long one is cut to an Event's 1 KiB.
func TestPostConfigProblems(t *testing.T) {
	src := newViews("overlap")
	ev := &nodeEvents{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		PostConfigProblems(ctx, src, ev)
	}()
	const r = ReasonConfigProblem + ": "
	ev.wait(t, r+"overlap")
	src.set(t, "overlap", "nccl pools")
	ev.wait(t, r+"overlap", r+"nccl pools")
	src.set(t, "nccl pools")
	src.set(t)
	ev.wait(t, r+"overlap", r+"nccl pools")
	long := strings.Repeat("x", 2000)
	src.set(t, "overlap", long)
	ev.wait(t, r+"overlap", r+"nccl pools", r+"overlap", r+long[:maxEventMessage-3]+"...")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("PostConfigProblems did not return when its context ended")
	}
}
