// Package podres asks the kubelet's PodResources API which devices a pod
// was allocated. It owns only the gRPC client; callers decide what to do
// with the answer.
package podres

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Client talks to one kubelet socket.
type Client struct {
	conn *grpc.ClientConn
	api  podresourcesv1.PodResourcesListerClient
}

// Dial prepares a client for the unix socket at path; it does not connect
// until the first call.
func Dial(path string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial kubelet pod-resources socket %s: %w", path, err)
	}
	return &Client{conn: conn, api: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Devices returns the device IDs allocated to the pod, by resource name,
// over all its containers, sorted. It uses Get and falls back to List on a
// kubelet without the Get call (KubeletPodResourcesGet disabled).
func (c *Client) Devices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	var pod *podresourcesv1.PodResources
	resp, err := c.api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	switch status.Code(err) {
	case codes.OK:
		pod = resp.GetPodResources()
	case codes.NotFound:
		// The kubelet does not know the pod or it has no resources.
	case codes.Unimplemented:
		list, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			return nil, fmt.Errorf("list pod resources: %w", err)
		}
		for _, p := range list.GetPodResources() {
			if p.GetNamespace() == namespace && p.GetName() == name {
				pod = p
				break
			}
		}
	default:
		return nil, fmt.Errorf("get pod resources of %s/%s: %w", namespace, name, err)
	}
	out := map[string][]string{}
	for _, ctr := range pod.GetContainers() {
		for _, d := range ctr.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				if !slices.Contains(out[d.GetResourceName()], id) {
					out[d.GetResourceName()] = append(out[d.GetResourceName()], id)
				}
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}
