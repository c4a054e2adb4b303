package kubectlrdma

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/client/clientset"
	rdmaclient "github.com/kube-rdma/kube-rdma/pkg/client/clientset/typed/apis/v1alpha1"
)

// Errors the commands return; Execute prints them on one line.
var (
	// ErrCRDMissing: the API server does not serve rdmanodestates.
	ErrCRDMissing = errors.New("the RDMANodeState CRD is not installed: install the kube-rdma chart")
	// ErrNoDaemon: the node exists but has no RDMANodeState.
	ErrNoDaemon = errors.New("no kube-rdma daemon")
	// ErrNotFound: a node or pod named on the command line does not exist.
	ErrNotFound = errors.New("not found")
	// ErrForbidden: the user may not read what the command needs.
	ErrForbidden = errors.New("permission denied")
	// ErrNewerState: a state written by a daemon newer than this binary.
	ErrNewerState = errors.New("written by a newer daemon")
)

// Cluster is what the commands read. Get methods return an error that Is
// ErrNotFound for a missing object; every method returns one that Is
// ErrForbidden when RBAC says no, and the state methods one that Is
// ErrCRDMissing when the resource is not served.
type Cluster interface {
	ListStates(ctx context.Context) ([]v1alpha1.RDMANodeState, error)
	GetState(ctx context.Context, node string) (*v1alpha1.RDMANodeState, error)
	ListNodes(ctx context.Context) ([]corev1.Node, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// ListPods lists one namespace's pods, every namespace's for "".
	ListPods(ctx context.Context, namespace string) ([]corev1.Pod, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

type kubeCluster struct {
	core kubernetes.Interface
	rns  rdmaclient.RDMANodeStateInterface
}

// NewCluster is the Cluster of the kubeconfig the flags name.
func NewCluster(g genericclioptions.RESTClientGetter) (Cluster, error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rdma, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", v1alpha1.Resource, err)
	}
	return &kubeCluster{core: core, rns: rdma.RDMAV1alpha1().RDMANodeStates()}, nil
}

func (k *kubeCluster) ListStates(ctx context.Context) ([]v1alpha1.RDMANodeState, error) {
	l, err := k.rns.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, ErrCRDMissing
	}
	if err != nil {
		return nil, apiError("list "+v1alpha1.Resource, err)
	}
	return l.Items, nil
}

func (k *kubeCluster) GetState(ctx context.Context, node string) (*v1alpha1.RDMANodeState, error) {
	s, err := k.rns.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// A missing object and a missing resource are both 404: a list
		// tells them apart.
		_, lerr := k.rns.List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(lerr) {
			return nil, ErrCRDMissing
		}
		return nil, fmt.Errorf("rdmanodestate %s: %w", node, ErrNotFound)
	}
	if err != nil {
		return nil, apiError("get rdmanodestate "+node, err)
	}
	return s, nil
}

func (k *kubeCluster) ListNodes(ctx context.Context) ([]corev1.Node, error) {
	l, err := k.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, apiError("list nodes", err)
	}
	return l.Items, nil
}

func (k *kubeCluster) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := k.core.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, apiError("get node "+name, err)
	}
	return n, nil
}

func (k *kubeCluster) ListPods(ctx context.Context, namespace string) ([]corev1.Pod, error) {
	l, err := k.core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, apiError("list pods", err)
	}
	return l.Items, nil
}

func (k *kubeCluster) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := k.core.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return nil, apiError("get pod "+namespace+"/"+name, err)
	}
	return p, nil
}

// apiError says what was being done; a Forbidden answer Is ErrForbidden and
// keeps the API server's message (who may not do what).
func apiError(doing string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w: %s: %s: ask for get and list on nodes, pods and %s.%s",
			ErrForbidden, doing, err.Error(), v1alpha1.Resource, v1alpha1.GroupVersion.Group)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// checkVersion refuses a state this binary would misread.
func checkVersion(s *v1alpha1.RDMANodeState) error {
	if v := s.Status.StateVersion; v > v1alpha1.StateVersion {
		return fmt.Errorf("rdmanodestate %s: %w (state version %d, this kubectl-rdma reads up to %d): upgrade kubectl-rdma",
			s.Name, ErrNewerState, v, v1alpha1.StateVersion)
	}
	return nil
}
