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
)

// gRPC status codes the client tells apart.
const (
	codeOK            = 0
	codeNotFound      = 5
	codeUnimplemented = 12
)

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

// Client talks to one kubelet socket, one connection per call.
type Client struct{ socket string }

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
// kubelet without the Get call (KubeletPodResourcesGet disabled). A pod the
// kubelet does not know has no devices.
func (c *Client) Devices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	var pod *podResources
	resp, err := c.call(ctx, "Get", encodeGetRequest(name, namespace))
	var se *StatusError
	switch {
	case err == nil:
		pods, derr := decodePods(resp)
		if derr != nil {
			return nil, fmt.Errorf("decode Get response: %w", derr)
		}
		if len(pods) > 0 {
			pod = &pods[0]
		}
	case errors.As(err, &se) && se.Code == codeNotFound:
	case errors.As(err, &se) && se.Code == codeUnimplemented:
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
				pod = &pods[i]
				break
			}
		}
	default:
		return nil, fmt.Errorf("get pod resources of %s/%s: %w", namespace, name, err)
	}
	out := map[string][]string{}
	if pod == nil {
		return out, nil
	}
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
