package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWaitDaemonSet: the wait ends when every scheduled pod is updated and
// ready, and on timeout names the short count. The API server is client-go's
// fake: the status counts are what the DaemonSet controller would write.
func TestWaitDaemonSet(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kr", Name: "kube-rdma-uninstall", Generation: 1},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberReady: 2}}
	kube := fake.NewClientset(ds)
	_, err := waitDaemonSet(t.Context(), kube, "kr", "kube-rdma-uninstall", "", 50*time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "desired 3, updated 3, ready 2") {
		t.Fatalf("wait with 2 of 3 ready = %v, want a deadline naming ready 2", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waitDaemonSet(context.Background(), kube, "kr", "kube-rdma-uninstall", "", 10*time.Second, 5*time.Millisecond)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	ready := ds.DeepCopy()
	ready.Status.NumberReady = 3
	if _, err := kube.AppsV1().DaemonSets("kr").UpdateStatus(t.Context(), ready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait after the third pod is ready = %v", err)
	}
}

// TestWaitDaemonSetCover: with --cover, a hook DaemonSet with 0 of 0 pods
// ready is not done while the agent still has pods on nodes (one scheduled,
// two on nodes tainted since they started: misscheduled); it is done once
// the hook schedules 3; an absent agent DaemonSet times out naming it.
func TestWaitDaemonSetCover(t *testing.T) {
	hook := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kr", Name: "kube-rdma-uninstall", Generation: 1},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1}}
	agent := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kr", Name: "kube-rdma", Generation: 1},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, NumberMisscheduled: 2}}
	kube := fake.NewClientset(hook, agent)
	if n, err := waitDaemonSet(t.Context(), kube, "kr", "kube-rdma-uninstall", "", time.Second, 5*time.Millisecond); err != nil || n != 0 {
		t.Fatalf("without --cover: %d pods, %v; want 0 of 0 done", n, err)
	}
	_, err := waitDaemonSet(t.Context(), kube, "kr", "kube-rdma-uninstall", "kube-rdma", 50*time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "schedules 0 pods, DaemonSet kube-rdma has pods on 3 nodes (1 scheduled, 2 misscheduled)") {
		t.Fatalf("cover with 0 hook pods = %v, want a deadline naming 0 against 3", err)
	}
	_, err = waitDaemonSet(t.Context(), kube, "kr", "kube-rdma-uninstall", "absent", 50*time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "kr/absent to cover") {
		t.Fatalf("cover of an absent DaemonSet = %v, want a deadline naming it", err)
	}
	type result struct {
		n   int32
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := waitDaemonSet(context.Background(), kube, "kr", "kube-rdma-uninstall", "kube-rdma", 10*time.Second, 5*time.Millisecond)
		done <- result{n, err}
	}()
	time.Sleep(20 * time.Millisecond)
	all := hook.DeepCopy()
	all.Status.DesiredNumberScheduled, all.Status.UpdatedNumberScheduled, all.Status.NumberReady = 3, 3, 3
	if _, err := kube.AppsV1().DaemonSets("kr").UpdateStatus(t.Context(), all, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.n != 3 {
		t.Fatalf("cover once the hook has 3 ready pods: %d, %v", r.n, r.err)
	}
}
