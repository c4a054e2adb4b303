package nodestate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	rdmaac "github.com/kube-rdma/kube-rdma/pkg/client/applyconfiguration/apis/v1alpha1"
	rdmaclient "github.com/kube-rdma/kube-rdma/pkg/client/clientset/typed/apis/v1alpha1"
)

// FieldManager is the server-side apply field manager of every write.
const FieldManager = "kube-rdma-device-plugin"

// applyOptions: the daemon is the object's only writer, so it takes any
// field another manager touched back (force).
var applyOptions = metav1.ApplyOptions{FieldManager: FieldManager, Force: true}

// Client writes RDMANodeState objects to an API server through the generated
// typed client (pkg/client) and reads the Node it hangs them on.
type Client struct {
	nodes  corev1client.NodesGetter
	states rdmaclient.RDMANodeStatesGetter

	mu     sync.Mutex
	warned map[string]bool // status fields the installed CRD lacked, said once each
}

// NewClient returns a Client over the daemon's clients: the core group's
// (kubernetes.Interface.CoreV1()) and kube-rdma's
// (clientset.Interface.RDMAV1alpha1()), built on one rest.Config.
func NewClient(nodes corev1client.NodesGetter, states rdmaclient.RDMANodeStatesGetter) *Client {
	return &Client{nodes: nodes, states: states}
}

// Apply writes the status of node's object, creating the object first when
// it does not exist (or no longer does: the Node was deleted and came back).
//
// Helm never upgrades a chart's crds/, so after helm upgrade the installed
// CRD can predate a status field this daemon writes, and server-side apply
// refuses the whole write (".status.summary.table: field not declared in
// schema"). Apply then writes the status without each field so refused, and
// warns once per field: the state stays current but for fields that the CRD
// could not hold anyway. Every write tries the whole status first, so a CRD
// applied later gets the fields at the next write.
func (c *Client) Apply(ctx context.Context, node string, st *v1alpha1.RDMANodeStateStatus) error {
	var drop []string
	for {
		err := c.apply(ctx, node, st, drop)
		path := undeclaredField(err)
		if path == "" || slices.Contains(drop, path) || len(drop) >= 16 {
			return err
		}
		drop = append(drop, path)
		c.mu.Lock()
		if !c.warned[path] {
			if c.warned == nil {
				c.warned = map[string]bool{}
			}
			c.warned[path] = true
			slog.Warn("the installed RDMANodeState CRD predates a status field this daemon writes: writing the status without it; apply the chart's crds/ (helm upgrade does not)",
				"node", node, "field", "status."+path)
		}
		c.mu.Unlock()
	}
}

// undeclared is server-side apply's refusal of a status field the CRD's
// schema lacks.
var undeclared = regexp.MustCompile(`\.status\.([A-Za-z0-9.]+): field not declared in schema`)

// undeclaredField is the status field (dotted, under status) err refuses as
// undeclared, or "".
func undeclaredField(err error) string {
	if err == nil {
		return ""
	}
	if m := undeclared.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

func (c *Client) apply(ctx context.Context, node string, st *v1alpha1.RDMANodeStateStatus, drop []string) error {
	ac, err := statusApply(node, st, drop)
	if err != nil {
		return err
	}
	err = c.applyStatus(ctx, ac)
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.create(ctx, node); err != nil {
		return err
	}
	return c.applyStatus(ctx, ac)
}

func (c *Client) applyStatus(ctx context.Context, ac *rdmaac.RDMANodeStateApplyConfiguration) error {
	if _, err := c.states.RDMANodeStates().ApplyStatus(ctx, ac, applyOptions); err != nil {
		return fmt.Errorf("apply rdmanodestate %s/status: %w", *ac.Name, err)
	}
	return nil
}

// create applies the object with its spec and the Node as its owner.
func (c *Client) create(ctx context.Context, node string) error {
	n, err := c.nodes.Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	ac := rdmaac.RDMANodeState(node).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Node").WithName(node).WithUID(n.UID)).
		WithSpec(rdmaac.RDMANodeStateSpec().WithNodeName(node))
	if _, err := c.states.RDMANodeStates().Apply(ctx, ac, applyOptions); err != nil {
		return fmt.Errorf("apply rdmanodestate %s: %w", node, err)
	}
	return nil
}

// statusApply is the apply configuration of node's status: exactly the
// fields st sets. Build returns the API type (pure, compared with cmp in its
// tests); the generated apply configuration has the same JSON shape, field
// for field (both come from pkg/apis/v1alpha1), so the status goes over
// through its JSON: a field st omits (omitempty) is not applied, a field it
// sets, zero or not, is.
// The fields drop names (dotted paths under status) are left out.
func statusApply(node string, st *v1alpha1.RDMANodeStateStatus, drop []string) (*rdmaac.RDMANodeStateApplyConfiguration, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode rdmanodestate %s status: %w", node, err)
	}
	if len(drop) > 0 {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("encode rdmanodestate %s status: %w", node, err)
		}
		for _, path := range drop {
			deletePath(m, strings.Split(path, "."))
		}
		if raw, err = json.Marshal(m); err != nil {
			return nil, fmt.Errorf("encode rdmanodestate %s status: %w", node, err)
		}
	}
	var sac rdmaac.RDMANodeStateStatusApplyConfiguration
	if err := json.Unmarshal(raw, &sac); err != nil {
		return nil, fmt.Errorf("rdmanodestate %s status apply configuration: %w", node, err)
	}
	return rdmaac.RDMANodeState(node).WithStatus(&sac), nil
}

// deletePath removes the field at path from m's nested objects, if there.
func deletePath(m map[string]any, path []string) {
	for len(path) > 1 {
		next, ok := m[path[0]].(map[string]any)
		if !ok {
			return
		}
		m, path = next, path[1:]
	}
	delete(m, path[0])
}
