package nri

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// TestHandover: two instances of the plugin on one runtime socket, as the
// old and the new pod of a DaemonSet update. Only the first registers; the
// second says why it waits; once the first stops, the second registers
// within a few turnPolls, and a container is adjusted by exactly one plugin
// (with both registered the runtime refuses it: "both tried to set Rlimits").
func TestHandover(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	rt := newRuntime(t, socket)
	t.Cleanup(rt.Stop)
	run := func(logs *syncBuffer) (*Plugin, func()) {
		p := New(Config{Socket: socket, Source: fakeSource{}, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		}
		t.Cleanup(stop)
		return p, stop
	}
	oldLogs, newLogs := &syncBuffer{}, &syncBuffer{}
	old, stopOld := run(oldLogs)
	waitFor(t, "the first instance's registration", func() bool { return old.Report().Connected })
	next, _ := run(newLogs)
	waitFor(t, "the second instance to say it waits", func() bool {
		return strings.Contains(next.Report().Reason, "another instance of this NRI plugin is registered")
	})
	with := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), rdmaCM}, nil)
	create := func() ([]*api.POSIXRlimit, error) {
		rsp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: with})
		return rsp.GetAdjust().GetRlimits(), err
	}
	// The runtime adds a registered plugin to its call list a moment after
	// it counts itself connected (TestPluginAgainstNRIRuntime).
	waitFor(t, "a container adjusted by the first instance", func() bool {
		got, err := create()
		return err == nil && len(got) == 1
	})
	time.Sleep(3 * turnPoll) // the second instance had turns to take, and took none
	if r := next.Report(); r.Connected || r.Attempts != 0 {
		t.Fatalf("second instance while the first runs: %+v; want not connected, no attempt", r)
	}
	stopOld()
	start := time.Now()
	waitFor(t, "the second instance's registration", func() bool { return next.Report().Connected })
	took := time.Since(start)
	waitFor(t, "a container adjusted by the second instance", func() bool {
		got, err := create()
		return err == nil && len(got) == 1
	})
	if n := next.Report().Adjusted; n < 1 {
		t.Errorf("second instance adjusted %d containers, want at least 1", n)
	}
	if !strings.Contains(newLogs.String(), "the other instance of the NRI plugin stopped; registering") {
		t.Errorf("second instance's log says nothing of the handover:\n%s", newLogs)
	}
	t.Logf("second instance registered %s after the first stopped", took.Round(time.Millisecond))
}
