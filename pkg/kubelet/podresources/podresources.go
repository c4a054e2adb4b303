// Package podresources asks the kubelet's PodResources API (v1, gRPC on a
// unix socket) which devices its pods were allocated. It owns the clients
// and the answer's shape; callers decide what to do with the answer.
//
// Client is what callers use. It has two implementations, which a shared
// test table runs against the same real grpc-go server (podrestest) and
// holds to identical answers and errors:
//
//   - H2Client, here: the two unary calls it needs (Get, List) as gRPC over
//     a minimal HTTP/2 client (h2.go) with hand-encoded protobuf (proto.go),
//     standard library and golang.org/x/net/http2/hpack only. It is for the
//     CNI plugin, which the runtime execs for every ADD and DEL: grpc-go's
//     and protobuf's package initialization alone took about 17 ms per exec
//     on the loaded CI VM (GODEBUG=inittrace=1), against under 5 ms for
//     everything the plugin links now, and linking grpc-go doubled its
//     start-up (docs/cni.md, Build; cmd/cni's deps test keeps it so).
//   - grpcclient.Client: the upstream API (k8s.io/kubelet's podresources/v1)
//     over grpc-go, one kept connection, for the long-running daemon, which
//     links grpc-go anyway. It lives in a subpackage so that importing this
//     one links no grpc-go.
//
// This package must not import grpc-go, protobuf or k8s.io/kubelet (the CNI
// plugin links it), nor log: errors carry what happened.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Client asks one kubelet's PodResources API. H2Client and
// grpcclient.Client implement it.
type Client interface {
	// List returns the device IDs of every pod container the kubelet
	// knows, one entry per container and resource, in the kubelet's order.
	List(ctx context.Context) ([]ContainerDevices, error)
	// PodContainerDevices returns one pod's device IDs in List's shape. It
	// asks Get and, on a kubelet that does not serve Get, List (GetOrList).
	// A pod the kubelet does not know is ErrPodNotFound.
	PodContainerDevices(ctx context.Context, namespace, name string) ([]ContainerDevices, error)
	// Close releases the connection, if the client keeps one.
	Close() error
}

// ContainerDevices is one container's device IDs of one resource.
type ContainerDevices struct {
	Namespace, Pod, Container, Resource string
	DeviceIDs                           []string
}

// ByResource returns the device IDs of ctrs by resource name, over all
// containers, without duplicates, sorted: a pod's allocation.
func ByResource(ctrs []ContainerDevices) map[string][]string {
	out := map[string][]string{}
	seen := map[string]map[string]struct{}{} // by resource: linear in the IDs, however many
	for _, c := range ctrs {
		ids := seen[c.Resource]
		if ids == nil {
			ids = make(map[string]struct{}, len(c.DeviceIDs))
			seen[c.Resource] = ids
		}
		for _, id := range c.DeviceIDs {
			if _, dup := ids[id]; !dup {
				ids[id] = struct{}{}
				out[c.Resource] = append(out[c.Resource], id)
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// ErrPodNotFound is returned when the kubelet does not know the pod.
var ErrPodNotFound = errors.New("kubelet does not know the pod")

// StatusError is a non-OK gRPC status: the one the kubelet answered, or the
// one grpc-go gives a call that got no answer (Unavailable: the socket is
// missing or refuses; DeadlineExceeded and Canceled: the context ended,
// which Err then holds, so errors.Is(err, context.DeadlineExceeded) works).
type StatusError struct {
	Code    int
	Message string
	// Err is the local cause of a status the kubelet did not send, or nil.
	Err error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("grpc status %d: %s", e.Code, e.Message)
}

func (e *StatusError) Unwrap() error { return e.Err }

// gRPC status codes the clients tell apart or give.
const (
	CodeOK               = 0
	CodeCanceled         = 1
	CodeUnknown          = 2
	CodeDeadlineExceeded = 4
	CodeNotFound         = 5
	// CodeResourceExhausted is the kubelet's rate limit's answer
	// ("rejected by rate limit"; 100 calls a second, bursts of 10, Get and
	// List together, kubernetes pkg/kubelet/apis/podresources/grpc).
	CodeResourceExhausted = 8
	CodeUnimplemented     = 12
	CodeUnavailable       = 14
)

// ContextStatus is the status of a call that failed because ctx ended, or
// nil while ctx has not: DeadlineExceeded once ctx's deadline has passed,
// even if ctx's timer has not fired yet (grpc-go judges a reset stream the
// same way), else Canceled once ctx is canceled.
func ContextStatus(ctx context.Context) *StatusError {
	d, ok := ctx.Deadline()
	if ok && !d.After(time.Now()) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &StatusError{Code: CodeDeadlineExceeded, Message: context.DeadlineExceeded.Error(), Err: context.DeadlineExceeded}
	}
	if err := ctx.Err(); err != nil {
		return &StatusError{Code: CodeCanceled, Message: err.Error(), Err: err}
	}
	return nil
}

// MaxMessage bounds a response (the kubelet's own default is 16 MiB).
const MaxMessage = 16 << 20

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 30 * time.Second

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

// GetOrList is the Get->List fallback both clients share. Its zero value
// asks Get first; once the kubelet has answered that it does not serve Get
// (code 12, or code 2 with the kubelet's "Get method disabled" message) it
// remembers, and later calls go straight to List.
type GetOrList struct {
	noGet   atomic.Bool
	support atomic.Int32 // a GetSupport
}

// GetSupport is what a kubelet has answered to Get.
type GetSupport int32

const (
	// GetUnknown: Get not asked (or SkipGet), or no answer that tells.
	GetUnknown GetSupport = iota
	// GetServed: the kubelet answered Get for a pod (its devices, or that
	// it does not know the pod).
	GetServed
	// GetNotServed: the kubelet answered that it does not serve Get.
	GetNotServed
)

// SkipGet makes later calls go straight to List, as if the kubelet had
// answered that it does not serve Get: for a caller that remembers that
// answer from an earlier process (the CNI plugin, docs/cni.md). It is a
// hint only: List answers on every kubelet, so a stale hint costs no call
// and no wrong answer. GetSupport stays what the kubelet said (GetUnknown
// until it is asked Get).
func (f *GetOrList) SkipGet() { f.noGet.Store(true) }

// GetSupport returns what the kubelet has answered to Get so far.
func (f *GetOrList) GetSupport() GetSupport { return GetSupport(f.support.Load()) }

// Pod returns one pod's devices. get asks the kubelet's Get for the pod
// (its errors: *StatusError for a status, ErrPodNotFound for an empty
// answer); list asks List and returns the pod's devices and whether List
// had the pod. A pod the kubelet does not know is ErrPodNotFound, whichever
// way it says so.
func (f *GetOrList) Pod(ctx context.Context, namespace, name string,
	get func(context.Context) ([]ContainerDevices, error),
	list func(context.Context) ([]ContainerDevices, bool, error),
) ([]ContainerDevices, error) {
	if !f.noGet.Load() {
		ctrs, err := get(ctx)
		var se *StatusError
		switch {
		case err == nil:
			f.support.Store(int32(GetServed))
			return ctrs, nil
		case errors.Is(err, ErrPodNotFound):
			f.support.Store(int32(GetServed))
			return nil, fmt.Errorf("get pod resources of %s/%s: %w", namespace, name, err)
		case errors.As(err, &se) && (se.Code == CodeNotFound ||
			se.Code == CodeUnknown && se.Message == podNotFound(namespace, name)):
			f.support.Store(int32(GetServed))
			return nil, fmt.Errorf("get pod resources of %s/%s: %w: %w", namespace, name, ErrPodNotFound, err)
		case errors.As(err, &se) && (se.Code == CodeUnimplemented ||
			se.Code == CodeUnknown && se.Message == getDisabled):
			f.support.Store(int32(GetNotServed))
			f.noGet.Store(true)
		default:
			return nil, fmt.Errorf("get pod resources of %s/%s: %w", namespace, name, err)
		}
	}
	ctrs, found, err := list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("list pod resources: %s/%s is not listed: %w", namespace, name, ErrPodNotFound)
	}
	return ctrs, nil
}
