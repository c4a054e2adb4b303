package netdevwatch

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Kube is PodInfo, PodFinder and EventPoster through the daemon's
// clientset: a GET of the pod (and of a claim, to name a pod of its UID), and core/v1 Events by client-go's recorder (which aggregates
// repeats with a PATCH; RBAC: events create and patch).
type Kube struct {
	cs          kubernetes.Interface
	node        string
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// NewKube returns a Kube whose Events name component kube-rdma on node.
// Stop ends its event broadcaster.
func NewKube(cs kubernetes.Interface, node string) *Kube {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return &Kube{cs: cs, node: node, broadcaster: b,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-rdma", Host: node})}
}

// Stop flushes nothing more and ends the broadcaster.
func (k *Kube) Stop() { k.broadcaster.Shutdown() }

// Pod implements PodInfo.
func (k *Kube) Pod(ctx context.Context, namespace, name string) (PodStatus, error) {
	p, err := k.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return PodStatus{}, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrPodNotFound)
	}
	if err != nil {
		return PodStatus{}, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return status(p), nil
}

// PodOfClaim implements PodFinder: a GET of the claim (the DRA front end's
// rules have it), the name its status.reservedFor gives the UID, then Pod.
func (k *Kube) PodOfClaim(ctx context.Context, namespace, claim, podUID string) (string, PodStatus, error) {
	c, err := k.cs.ResourceV1().ResourceClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", PodStatus{}, fmt.Errorf("resource claim %s/%s: %w", namespace, claim, ErrPodNotFound)
	}
	if err != nil {
		return "", PodStatus{}, fmt.Errorf("get resource claim %s/%s: %w", namespace, claim, err)
	}
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && string(r.UID) == podUID {
			st, err := k.Pod(ctx, namespace, r.Name)
			return r.Name, st, err
		}
	}
	return "", PodStatus{}, fmt.Errorf("pod %s of resource claim %s/%s: not reserved for any more: %w", podUID, namespace, claim, ErrPodNotFound)
}

func status(p *corev1.Pod) PodStatus {
	st := PodStatus{UID: string(p.UID), HostNetwork: p.Spec.HostNetwork}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionTrue {
			st.SandboxReady = c.LastTransitionTime.Time
		}
	}
	return st
}

// Warn implements EventPoster.
func (k *Kube) Warn(namespace, name, uid, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: types.UID(uid)}
	k.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}

// WarnNode implements NodePoster: an Event on the daemon's Node (UID the
// node's name, as the kubelet's own node Events carry).
func (k *Kube) WarnNode(reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: k.node, UID: types.UID(k.node)}
	k.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}
