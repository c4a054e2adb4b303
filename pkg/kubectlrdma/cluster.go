package kubectlrdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
	// StateTable is the API server's table of the RDMANodeStates (the
	// CRD's printer columns), not the objects: what nodes prints.
	StateTable(ctx context.Context) ([]StateRow, error)
	// NodeNames are the Nodes' names, from the API server's table.
	NodeNames(ctx context.Context) ([]string, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// ListPods lists one namespace's pods, every namespace's for "".
	ListPods(ctx context.Context, namespace string) ([]corev1.Pod, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// StateRow is one RDMANodeState as a list view shows it.
type StateRow struct {
	Name          string
	StateVersion  int
	NetnsMode     string
	DaemonVersion string
	LastUpdate    time.Time
	// Table is nil when the row has no summary table columns: its writer
	// predates them (or the installed CRD does).
	Table *v1alpha1.SummaryTable
	// wide are the -o wide cells, from a whole object (rowOf) only.
	wide []string
}

type kubeCluster struct {
	core kubernetes.Interface
	rdma rest.Interface
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
	return &kubeCluster{core: core, rdma: rdma.RDMAV1alpha1().RESTClient(), rns: rdma.RDMAV1alpha1().RDMANodeStates()}, nil
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

// tableAccept asks for a meta.k8s.io/v1 Table (what kubectl get asks for).
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// table gets resource's table, without objects, from the API server's
// cache: one unpaged request (a 5,000-row table is under 1 MB).
func table(ctx context.Context, c rest.Interface, resource string) (*metav1.Table, error) {
	res := c.Get().Resource(resource).SetHeader("Accept", tableAccept).
		Param("includeObject", string(metav1.IncludeNone)).Do(ctx)
	if err := res.Error(); err != nil { // Raw's error lacks the Status's message
		return nil, err
	}
	raw, err := res.Raw()
	if err != nil {
		return nil, err
	}
	var t metav1.Table
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("%s table: %w", resource, err)
	}
	if t.Kind != "Table" {
		return nil, fmt.Errorf("%s: the API server answered %q, not a Table", resource, t.Kind)
	}
	return &t, nil
}

// cellReader reads a table's cells by column name; a column the table does
// not have reads as missing.
type cellReader map[string]int

func newCellReader(t *metav1.Table) cellReader {
	r := cellReader{}
	for i, c := range t.ColumnDefinitions {
		r[c.Name] = i
	}
	return r
}

// str is the string cell of column, and whether the row has it.
func (r cellReader) str(row metav1.TableRow, column string) (string, bool) {
	i, ok := r[column]
	if !ok || i >= len(row.Cells) {
		return "", false
	}
	s, ok := row.Cells[i].(string)
	return s, ok
}

func (r cellReader) int(row metav1.TableRow, column string) int {
	i, ok := r[column]
	if !ok || i >= len(row.Cells) {
		return 0
	}
	switch v := row.Cells[i].(type) {
	case float64:
		return int(v)
	case int64:
		return int(v)
	}
	return 0
}

func (k *kubeCluster) StateTable(ctx context.Context) ([]StateRow, error) {
	t, err := table(ctx, k.rdma, v1alpha1.Resource)
	if apierrors.IsNotFound(err) {
		return nil, ErrCRDMissing
	}
	if err != nil {
		return nil, apiError("list "+v1alpha1.Resource, err)
	}
	c := newCellReader(t)
	rows := make([]StateRow, 0, len(t.Rows))
	for _, tr := range t.Rows {
		name, _ := c.str(tr, "Name")
		r := StateRow{Name: name, StateVersion: c.int(tr, "State Version")}
		r.NetnsMode, _ = c.str(tr, "Netns")
		r.DaemonVersion, _ = c.str(tr, "Daemon")
		if s, ok := c.str(tr, "Last Update"); ok {
			r.LastUpdate, _ = time.Parse(time.RFC3339, s)
		}
		pools, ok1 := c.str(tr, "Pools")
		unhealthy, ok2 := c.str(tr, "Unhealthy Devices")
		links, ok3 := c.str(tr, "Link")
		if ok1 && ok2 && ok3 {
			r.Table = &v1alpha1.SummaryTable{Pools: pools, UnhealthyDevices: unhealthy, LinkLayers: links}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func (k *kubeCluster) NodeNames(ctx context.Context) ([]string, error) {
	t, err := table(ctx, k.core.CoreV1().RESTClient(), "nodes")
	if err != nil {
		return nil, apiError("list nodes", err)
	}
	c := newCellReader(t)
	names := make([]string, 0, len(t.Rows))
	for _, tr := range t.Rows {
		if n, ok := c.str(tr, "Name"); ok {
			names = append(names, n)
		}
	}
	return names, nil
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
		return versionError(s.Name, v)
	}
	return nil
}

func versionError(name string, v int) error {
	return fmt.Errorf("rdmanodestate %s: %w (state version %d, this kubectl-rdma reads up to %d): upgrade kubectl-rdma",
		name, ErrNewerState, v, v1alpha1.StateVersion)
}
