// Package podres asks the kubelet's PodResources API (v1, gRPC on a unix
// socket) which devices a pod was allocated. It owns only the client;
// callers decide what to do with the answer.
//
// The client speaks the two unary calls it needs (Get, List) as plain gRPC
// over HTTP/2 with hand-encoded protobuf, instead of linking grpc-go: the CNI
// plugin is exec'd for every ADD and DEL, and grpc-go's and protobuf's
// package initialization doubled its start-up time. Tests check it against
// a real grpc-go server (podrestest).
package podres

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"golang.org/x/net/http2"
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

// Client talks to one kubelet socket.
type Client struct {
	tr   *http2.Transport
	http *http.Client
}

// Dial prepares a client for the unix socket at path; it does not connect
// until the first call.
func Dial(path string) (*Client, error) {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		ReadIdleTimeout: 10 * time.Second,
	}
	return &Client{tr: tr, http: &http.Client{Transport: tr}}, nil
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// call makes one unary gRPC call and returns the response message.
func (c *Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	body := make([]byte, 5+len(req))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(req)))
	copy(body[5:], req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/v1.PodResourcesLister/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("TE", "trailers")
	if dl, ok := ctx.Deadline(); ok {
		hreq.Header.Set("Grpc-Timeout", strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)+"m")
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet answered HTTP %d", resp.StatusCode)
	}
	if err := status(resp.Header); err != nil { // a trailers-only answer
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage+5))
	if err != nil {
		return nil, err
	}
	if err := status(resp.Trailer); err != nil {
		return nil, err
	}
	if len(data) < 5 {
		return nil, errors.New("grpc response without a message")
	}
	if data[0] != 0 {
		return nil, errors.New("grpc response is compressed")
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if int(n) != len(data)-5 {
		return nil, fmt.Errorf("grpc response length %d, got %d bytes", n, len(data)-5)
	}
	return data[5:], nil
}

func status(h http.Header) error {
	s := h.Get("Grpc-Status")
	if s == "" {
		return nil
	}
	code, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("bad grpc-status %q", s)
	}
	if code == codeOK {
		return nil
	}
	return &StatusError{Code: code, Message: h.Get("Grpc-Message")}
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
