package nodestate

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// FieldManager is the server-side apply field manager of every write.
const FieldManager = "kube-rdma-device-plugin"

const basePath = "/apis/rdma.kube-rdma.io/v1alpha1/" + v1alpha1.Resource

// Client writes RDMANodeState objects to an API server.
type Client struct {
	rest rest.Interface
}

// NewClient returns a Client for the API server of cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &v1alpha1.GroupVersion
	c.ContentType = runtime.ContentTypeJSON
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = FieldManager
	}
	r, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{rest: r}, nil
}

// applied is the shape of an apply request: only the fields it owns.
type applied struct {
	APIVersion string                        `json:"apiVersion"`
	Kind       string                        `json:"kind"`
	Metadata   appliedMeta                   `json:"metadata"`
	Spec       *v1alpha1.RDMANodeStateSpec   `json:"spec,omitempty"`
	Status     *v1alpha1.RDMANodeStateStatus `json:"status,omitempty"`
}

type appliedMeta struct {
	Name            string                  `json:"name"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// Apply writes the status of node's object, creating the object first when
// it does not exist (or no longer does: the Node was deleted and came back).
func (c *Client) Apply(ctx context.Context, node string, st *v1alpha1.RDMANodeStateStatus) error {
	err := c.apply(ctx, applied{Metadata: appliedMeta{Name: node}, Status: st}, "status")
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.create(ctx, node); err != nil {
		return err
	}
	return c.apply(ctx, applied{Metadata: appliedMeta{Name: node}, Status: st}, "status")
}

// create applies the object with its spec and the Node as its owner.
func (c *Client) create(ctx context.Context, node string) error {
	var n struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	raw, err := c.rest.Get().AbsPath("/api/v1/nodes", node).Do(ctx).Raw()
	if err != nil {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	if err := json.Unmarshal(raw, &n); err != nil || n.Metadata.UID == "" {
		return fmt.Errorf("get node %s: no uid in the answer (%v)", node, err)
	}
	obj := applied{
		Metadata: appliedMeta{Name: node, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: node, UID: n.Metadata.UID}}},
		Spec: &v1alpha1.RDMANodeStateSpec{NodeName: node},
	}
	return c.apply(ctx, obj, "")
}

func (c *Client) apply(ctx context.Context, obj applied, subresource string) error {
	obj.APIVersion, obj.Kind = v1alpha1.GroupVersion.String(), "RDMANodeState"
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s: %w", obj.Metadata.Name, err)
	}
	req := c.rest.Patch(types.ApplyPatchType).AbsPath(basePath, obj.Metadata.Name)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	err = req.Param("fieldManager", FieldManager).Param("force", "true").Body(body).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("apply rdmanodestate %s%s: %w", obj.Metadata.Name, suffix(subresource), err)
	}
	return nil
}

func suffix(sub string) string {
	if sub == "" {
		return ""
	}
	return "/" + sub
}
