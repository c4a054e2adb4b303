package claimstatus

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
)

// maxManager is the API server's bound on a field manager's length.
const maxManager = 128

// FieldManager is the server-side apply field manager of a node's writer:
// "kube-rdma.io/<node>", cut at 128 bytes. A claim's devices are on one
// node, so one node's writer owns its entries.
func FieldManager(node string) string {
	m := "kube-rdma.io/" + node
	if len(m) > maxManager {
		m = m[:maxManager]
	}
	return m
}

// Kube is Client through the daemon's clientset: a GET of the claim, and
// an apply (PATCH, application/apply-patch+yaml, forced) of its status
// subresource. RBAC: resourceclaims get (the DRA front end's), and
// resourceclaims/status patch.
type Kube struct {
	cs      kubernetes.Interface
	manager string
}

// NewKube returns a Kube applying as FieldManager(node).
func NewKube(cs kubernetes.Interface, node string) *Kube {
	return &Kube{cs: cs, manager: FieldManager(node)}
}

// Get implements Client.
func (k *Kube) Get(ctx context.Context, namespace, name, uid string) (*resourceapi.ResourceClaim, error) {
	c, err := k.cs.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("resource claim %s/%s: %w", namespace, name, ErrClaimGone)
	}
	if err != nil {
		return nil, fmt.Errorf("get resource claim %s/%s: %w", namespace, name, err)
	}
	if string(c.UID) != uid {
		return nil, fmt.Errorf("resource claim %s/%s has uid %s, not %s: %w", namespace, name, c.UID, uid, ErrClaimGone)
	}
	return c, nil
}

// ApplyStatus implements Client. Forced: the entries of this node's
// devices are its writer's alone.
func (k *Kube) ApplyStatus(ctx context.Context, claim *resourceac.ResourceClaimApplyConfiguration) error {
	ns, name := *claim.Namespace, *claim.Name
	_, err := k.cs.ResourceV1().ResourceClaims(ns).ApplyStatus(ctx, claim, metav1.ApplyOptions{FieldManager: k.manager, Force: true})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("resource claim %s/%s: %w", ns, name, ErrClaimGone)
	case uidRefused(err):
		return fmt.Errorf("resource claim %s/%s is not uid %s any more: %w: %w", ns, name, *claim.UID, ErrClaimGone, err)
	case err != nil:
		return fmt.Errorf("apply status of resource claim %s/%s: %w", ns, name, err)
	}
	return nil
}

// uidRefused reports whether the API server refused an apply for its
// metadata.uid: the object of that name has another UID (a claim created
// again). It answers 422 with a cause on that field.
func uidRefused(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
