package kubectlrdma

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// fakeCluster serves a world from memory; err, when set, is every call's
// answer (a missing CRD, a Forbidden).
type fakeCluster struct {
	w   *world
	err error
	// noCRD makes the state methods answer ErrCRDMissing.
	noCRD bool
}

func (f *fakeCluster) newCluster(genericclioptions.RESTClientGetter) (Cluster, error) { return f, nil }

func (f *fakeCluster) ListStates(context.Context) ([]v1alpha1.RDMANodeState, error) {
	if f.noCRD {
		return nil, ErrCRDMissing
	}
	out := make([]v1alpha1.RDMANodeState, len(f.w.states))
	for i := range f.w.states {
		f.w.states[i].DeepCopyInto(&out[i])
	}
	return out, f.err
}

func (f *fakeCluster) GetState(_ context.Context, name string) (*v1alpha1.RDMANodeState, error) {
	if f.noCRD {
		return nil, ErrCRDMissing
	}
	for _, s := range f.w.states {
		if s.Name == name {
			return s.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("rdmanodestate %s: %w", name, ErrNotFound)
}

func (f *fakeCluster) ListNodes(context.Context) ([]corev1.Node, error) {
	return append([]corev1.Node(nil), f.w.nodes...), f.err
}

func (f *fakeCluster) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	for _, n := range f.w.nodes {
		if n.Name == name {
			return n.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("node %q: %w", name, ErrNotFound)
}

func (f *fakeCluster) ListPods(_ context.Context, ns string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range f.w.pods {
		if ns == "" || p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out, f.err
}

func (f *fakeCluster) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range f.w.pods {
		if p.Namespace == ns && p.Name == name {
			return p.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("pod %s/%s: %w", ns, name, ErrNotFound)
}
