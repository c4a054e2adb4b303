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
	err := waitDaemonSet(t.Context(), kube, "kr", "kube-rdma-uninstall", 50*time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "desired 3, updated 3, ready 2") {
		t.Fatalf("wait with 2 of 3 ready = %v, want a deadline naming ready 2", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- waitDaemonSet(context.Background(), kube, "kr", "kube-rdma-uninstall", 10*time.Second, 5*time.Millisecond)
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
