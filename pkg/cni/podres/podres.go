// Package podres asks the kubelet's PodResources API (v1, gRPC on a unix
// socket) which devices a pod was allocated. It owns only the client;
// callers decide what to do with the answer.
//
// The client speaks the two unary calls it needs (Get, List) as gRPC over a
// minimal HTTP/2 client (h2.go) with hand-encoded protobuf, instead of
// linking grpc-go or net/http: the CNI plugin is exec'd for every ADD and
// DEL, and those packages doubled its start-up time. Tests check it against
// a real grpc-go server (podrestest).
package podres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// gRPC status codes the client tells apart.
const (
	codeOK            = 0
	codeUnknown       = 2
	codeNotFound      = 5
	codeUnimplemented = 12
)

// ErrPodNotFound is returned when the kubelet does not know the pod.
var ErrPodNotFound = errors.New("kubelet does not know the pod")

// getDisabled is the whole message of the kubelet's answer to Get while the
// KubeletPodResourcesGet feature gate is off (kubelets 1.27-1.33 by
// default): a plain error, so gRPC sends it as code 2 (Unknown), a code
// every unexpected failure also gets. The message is the only thing that
// tells this answer apart, so it is compared, whole, only with code 2.
// Kubelets before 1.27 have no Get at all and answer code 12.
const getDisabled = "PodResources API Get method disabled"

// podNotFound is the whole message of the kubelet's answer to Get for a pod
// it does not know, also a plain error sent as code 2 (kubernetes
// pkg/kubelet/apis/podresources/server_v1.go). Compared whole, with the
// pod's own name and namespace, and only with code 2.
func podNotFound(namespace, name string) string {
	return fmt.Sprintf("pod %s in namespace %s not found", name, namespace)
}

// StatusError is a non-OK gRPC status.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("grpc status %d: %s", e.Code, e.Message)
}

// maxMessage bounds a response (the kubelet's own default is 16 MiB).
const maxMessage = 16 << 20

// Client talks to one kubelet socket, one connection per call. It remembers
// that the kubelet does not serve Get, so later calls go straight to List.
type Client struct {
	socket string
	noGet  atomic.Bool
}

// Dial prepares a client for the unix socket at path; it does not connect
// until the first call.
func Dial(path string) (*Client, error) { return &Client{socket: path}, nil }

// Close releases nothing: connections last one call.
func (c *Client) Close() error { return nil }

func (c *Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	return unary(ctx, c.socket, method, req)
}

// Devices returns the device IDs allocated to the pod, by resource name,
// over all its containers, sorted. It uses Get and falls back to List on a
// kubelet that does not serve Get (code 12, or code 2 with the kubelet's
// "Get method disabled" message), and remembers that for later calls. A pod
// the kubelet does not know is ErrPodNotFound.
func (c *Client) Devices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	pod, err := c.pod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range pod.devices {
		if !slices.Contains(out[d.resource], d.id) {
			out[d.resource] = append(out[d.resource], d.id)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// PodContainerDevices returns one pod's device IDs, one entry per container
// and resource, in the kubelet's order: what a gpuAligned binding needs
// (each container's slots name its allocation directory). It asks Get and
// falls back to List as Devices does; a pod the kubelet does not know is
// ErrPodNotFound.
func (c *Client) PodContainerDevices(ctx context.Context, namespace, name string) ([]ContainerDevices, error) {
	pod, err := c.pod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return containerDevices(*pod), nil
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

func (c *Client) pod(ctx context.Context, namespace, name string) (*podResources, error) {
	if !c.noGet.Load() {
		resp, err := c.call(ctx, "Get", encodeGetRequest(name, namespace))
		var se *StatusError
		switch {
		case err == nil:
			pods, err := decodePods(resp)
			if err != nil {
				return nil, fmt.Errorf("decode Get response: %w", err)
			}
			if len(pods) == 0 {
				return nil, fmt.Errorf("get pod resources of %s/%s: empty answer: %w", namespace, name, ErrPodNotFound)
			}
			return &pods[0], nil
		case errors.As(err, &se) && (se.Code == codeNotFound ||
			se.Code == codeUnknown && se.Message == podNotFound(namespace, name)):
			return nil, fmt.Errorf("get pod resources of %s/%s: %w: %w", namespace, name, ErrPodNotFound, err)
		case errors.As(err, &se) && (se.Code == codeUnimplemented ||
			se.Code == codeUnknown && se.Message == getDisabled):
			c.noGet.Store(true)
		default:
			return nil, fmt.Errorf("get pod resources of %s/%s: %w", namespace, name, err)
		}
	}
	resp, err := c.call(ctx, "List", nil)
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	pods, err := decodePods(resp)
	if err != nil {
		return nil, fmt.Errorf("decode List response: %w", err)
	}
	for i := range pods {
		if pods[i].namespace == namespace && pods[i].name == name {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("list pod resources: %s/%s is not listed: %w", namespace, name, ErrPodNotFound)
}

// ContainerDevices is one container's device IDs of one resource.
type ContainerDevices struct {
	Namespace, Pod, Container, Resource string
	DeviceIDs                           []string
}

// List returns the device IDs of every pod container the kubelet knows, one
// entry per container and resource, in the kubelet's order. (Protobuf
// writes a container's name before its devices, so each device knows it.)
func (c *Client) List(ctx context.Context) ([]ContainerDevices, error) {
	resp, err := c.call(ctx, "List", nil)
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	pods, err := decodePods(resp)
	if err != nil {
		return nil, fmt.Errorf("decode List response: %w", err)
	}
	var out []ContainerDevices
	for _, p := range pods {
		out = append(out, containerDevices(p)...)
	}
	return out, nil
}
