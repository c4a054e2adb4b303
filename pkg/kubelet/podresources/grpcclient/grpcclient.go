// Package grpcclient is the podresources.Client over the upstream
// PodResources API (k8s.io/kubelet/pkg/apis/podresources/v1) and grpc-go,
// for the long-running daemon: one connection kept to the kubelet's socket
// (grpc-go redials it after a kubelet restart), a timeout on every call,
// and the Get->List fallback of podresources.GetOrList. Its answers and
// errors are those of podresources.H2Client, checked by one test table run
// against both.
//
// It owns no policy and does not log. The CNI plugin must not import it: it
// links grpc-go and protobuf, whose initialization the plugin cannot afford
// per exec (see package podresources).
package grpcclient

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// Client asks one kubelet over a kept gRPC connection. It is safe for
// concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	api     podresourcesv1.PodResourcesListerClient
	timeout time.Duration
	get     podresources.GetOrList
}

var _ podresources.Client = (*Client)(nil)

// redial is how soon grpc-go dials the socket again after a failure: a
// kubelet restart recreates the socket within seconds, and a call made
// while the connection waits to be redialed fails at once (Unavailable).
var redial = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// Dial returns a client for the kubelet's unix socket at path. It does not
// connect until the first call. Every call is bounded by timeout (0 is
// podresources.DefaultTimeout) as well as by its context.
func Dial(path string, timeout time.Duration) (*Client, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("podresources socket %s: %w", path, err)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: redial, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podresources.MaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("podresources client for %s: %w", abs, err)
	}
	if timeout <= 0 {
		timeout = podresources.DefaultTimeout
	}
	return &Client{conn: conn, api: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// SkipGet makes later calls ask List only (podresources.GetOrList.SkipGet).
func (c *Client) SkipGet() { c.get.SkipGet() }

// GetSupport returns what the kubelet has answered to Get so far.
func (c *Client) GetSupport() podresources.GetSupport { return c.get.GetSupport() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List returns the device IDs of every pod container the kubelet knows, one
// entry per container and resource, in the kubelet's order.
func (c *Client) List(ctx context.Context) ([]podresources.ContainerDevices, error) {
	pods, err := c.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	var out []podresources.ContainerDevices
	for _, p := range pods {
		out = append(out, containerDevices(p)...)
	}
	return out, nil
}

// PodContainerDevices returns one pod's device IDs in List's shape. It asks
// Get and falls back to List on a kubelet that does not serve Get
// (podresources.GetOrList); a pod the kubelet does not know is
// podresources.ErrPodNotFound.
func (c *Client) PodContainerDevices(ctx context.Context, namespace, name string) ([]podresources.ContainerDevices, error) {
	get := func(ctx context.Context) ([]podresources.ContainerDevices, error) {
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		resp, err := c.api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
		if err != nil {
			return nil, statusError(ctx, err)
		}
		if resp.GetPodResources() == nil {
			return nil, fmt.Errorf("empty answer: %w", podresources.ErrPodNotFound)
		}
		return containerDevices(resp.GetPodResources()), nil
	}
	list := func(ctx context.Context) ([]podresources.ContainerDevices, bool, error) {
		pods, err := c.list(ctx)
		if err != nil {
			return nil, false, err
		}
		for _, p := range pods {
			if p.GetNamespace() == namespace && p.GetName() == name {
				return containerDevices(p), true, nil
			}
		}
		return nil, false, nil
	}
	return c.get.Pod(ctx, namespace, name, get, list)
}

func (c *Client) list(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, statusError(ctx, err)
	}
	return resp.GetPodResources(), nil
}

// containerDevices flattens one pod: one entry per container and resource,
// in the kubelet's order, a resource listed twice in a container merged
// (as H2Client does).
func containerDevices(p *podresourcesv1.PodResources) []podresources.ContainerDevices {
	var out []podresources.ContainerDevices
	at := map[[2]string]int{}
	for _, ctr := range p.GetContainers() {
		for _, d := range ctr.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				k := [2]string{ctr.GetName(), d.GetResourceName()}
				i, ok := at[k]
				if !ok {
					i = len(out)
					at[k] = i
					out = append(out, podresources.ContainerDevices{Namespace: p.GetNamespace(), Pod: p.GetName(),
						Container: ctr.GetName(), Resource: d.GetResourceName()})
				}
				out[i].DeviceIDs = append(out[i].DeviceIDs, id)
			}
		}
	}
	return out
}

// statusError turns grpc-go's error into podresources' own: a
// *podresources.StatusError with the code and message, or, when ctx ended
// and the code says so, ctx's own status (grpc-go's status does not wrap
// ctx's error).
func statusError(ctx context.Context, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	code := int(s.Code())
	if cs := podresources.ContextStatus(ctx); cs != nil &&
		(code == podresources.CodeDeadlineExceeded || code == podresources.CodeCanceled) {
		return cs
	}
	return &podresources.StatusError{Code: code, Message: s.Message()}
}
