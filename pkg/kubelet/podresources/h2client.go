package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

// H2Client is the hand-written Client: one connection per call (the CNI
// plugin makes one or two), gRPC over the minimal HTTP/2 of h2.go. It
// remembers that the kubelet does not serve Get, so later calls go
// straight to List.
type H2Client struct {
	socket string
	get    GetOrList
}

var _ Client = (*H2Client)(nil)

// NewH2Client returns a client for the unix socket at path; it does not
// connect until the first call.
func NewH2Client(path string) *H2Client { return &H2Client{socket: path} }

// SkipGet makes later calls ask List only (GetOrList.SkipGet): the CNI
// plugin's hint, remembered from an earlier exec, that the kubelet does not
// serve Get.
func (c *H2Client) SkipGet() { c.get.SkipGet() }

// GetSupport returns what the kubelet has answered to Get so far.
func (c *H2Client) GetSupport() GetSupport { return c.get.GetSupport() }

// Close releases nothing: connections last one call.
func (c *H2Client) Close() error { return nil }

// call makes one unary call. A call that gets no answer fails with the
// status grpc-go gives it, so that both clients' errors read alike:
// Unavailable when the socket cannot be dialed, DeadlineExceeded or
// Canceled when ctx ends (or DefaultTimeout passes, for a ctx without a
// deadline). Other failures (a connection dropped, an answer cut short or
// garbled) stay plain errors.
func (c *H2Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	resp, err := unary(ctx, c.socket, method, req)
	if err == nil {
		return resp, nil
	}
	var se *StatusError
	var dial *net.OpError
	switch isStatus := errors.As(err, &se); {
	case (!isStatus || se.Code == CodeDeadlineExceeded || se.Code == CodeCanceled) && ContextStatus(ctx) != nil:
		// The kubelet's answer to our grpc-timeout, its reset of the
		// stream, or our own connection deadline: our context ended.
		return nil, ContextStatus(ctx)
	case isStatus:
		return nil, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &StatusError{Code: CodeDeadlineExceeded, Message: err.Error(), Err: errors.Join(context.DeadlineExceeded, err)}
	case errors.As(err, &dial) && dial.Op == "dial":
		return nil, &StatusError{Code: CodeUnavailable, Message: err.Error(), Err: err}
	}
	return nil, err
}

// PodContainerDevices returns one pod's device IDs, one entry per container
// and resource, in the kubelet's order: what a gpuAligned binding needs
// (each container's slots name its allocation directory). It asks Get and
// falls back to List (GetOrList); a pod the kubelet does not know is
// ErrPodNotFound.
func (c *H2Client) PodContainerDevices(ctx context.Context, namespace, name string) ([]ContainerDevices, error) {
	get := func(ctx context.Context) ([]ContainerDevices, error) {
		resp, err := c.call(ctx, "Get", encodeGetRequest(name, namespace))
		if err != nil {
			return nil, err
		}
		pods, err := decodePods(resp)
		if err != nil {
			return nil, fmt.Errorf("decode Get response: %w", err)
		}
		if len(pods) == 0 {
			return nil, fmt.Errorf("empty answer: %w", ErrPodNotFound)
		}
		return containerDevices(pods[0]), nil
	}
	list := func(ctx context.Context) ([]ContainerDevices, bool, error) {
		pods, err := c.list(ctx)
		if err != nil {
			return nil, false, err
		}
		for _, p := range pods {
			if p.namespace == namespace && p.name == name {
				return containerDevices(p), true, nil
			}
		}
		return nil, false, nil
	}
	return c.get.Pod(ctx, namespace, name, get, list)
}

func containerDevices(p podResources) []ContainerDevices {
	var out []ContainerDevices
	at := map[[2]string]int{}
	for _, d := range p.devices {
		k := [2]string{d.container, d.resource}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, ContainerDevices{Namespace: p.namespace, Pod: p.name, Container: d.container, Resource: d.resource})
		}
		out[i].DeviceIDs = append(out[i].DeviceIDs, d.id)
	}
	return out
}

// List returns the device IDs of every pod container the kubelet knows, one
// entry per container and resource, in the kubelet's order. (Protobuf
// writes a container's name before its devices, so each device knows it.)
func (c *H2Client) List(ctx context.Context) ([]ContainerDevices, error) {
	pods, err := c.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	var out []ContainerDevices
	for _, p := range pods {
		out = append(out, containerDevices(p)...)
	}
	return out, nil
}

func (c *H2Client) list(ctx context.Context) ([]podResources, error) {
	resp, err := c.call(ctx, "List", nil)
	if err != nil {
		return nil, err
	}
	pods, err := decodePods(resp)
	if err != nil {
		return nil, fmt.Errorf("decode List response: %w", err)
	}
	return pods, nil
}
