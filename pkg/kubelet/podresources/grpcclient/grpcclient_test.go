package grpcclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// The answers and errors both clients share are tested in package
// podresources (TestClients); these are what only this client has: its own
// per-call timeout and its kept connection.

// TestTimeout: a call whose context has no deadline is still bounded.
func TestTimeout(t *testing.T) {
	srv := podrestest.Start(t)
	srv.Hang.Store(true)
	c, err := grpcclient.Dial(srv.Socket, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	start := time.Now()
	_, err = c.List(context.Background())
	var se *podresources.StatusError
	if !errors.As(err, &se) || se.Code != podresources.CodeDeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("List from a kubelet that hangs = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("List took %s, want about 200ms", d)
	}
}

// TestKubeletRestart: the kept connection follows a kubelet that restarts
// on the same socket; calls made while it is away fail as Unavailable.
func TestKubeletRestart(t *testing.T) {
	pod := podrestest.Pod{Namespace: "ns", Name: "a", Devices: map[string][]string{"rdma/hca": {"mlx5_0"}}}
	want := []podresources.ContainerDevices{{Namespace: "ns", Pod: "a", Container: "main", Resource: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}}
	srv := podrestest.Start(t, pod)
	c, err := grpcclient.Dial(srv.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	var se *podresources.StatusError
	if _, err := c.List(ctx); !errors.As(err, &se) || se.Code != podresources.CodeUnavailable {
		t.Errorf("List while the kubelet is away = %v, want Unavailable", err)
	}
	podrestest.StartAt(t, srv.Socket, pod)
	for {
		got, err := c.List(ctx)
		if err == nil {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("List after the restart (-want +got):\n%s", diff)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("List after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll until the redial (at most a second apart) connects
	}
}
