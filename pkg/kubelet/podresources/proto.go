package podresources

import (
	"errors"
	"fmt"
)

// Field numbers of k8s.io/kubelet/pkg/apis/podresources/v1/api.proto.
const (
	getReqPodName      = 1 // GetPodResourcesRequest.pod_name
	getReqPodNamespace = 2 // GetPodResourcesRequest.pod_namespace
	respPodResources   = 1 // Get/ListPodResourcesResponse.pod_resources
	podName            = 1 // PodResources.name
	podNamespace       = 2 // PodResources.namespace
	podContainers      = 3 // PodResources.containers
	ctrName            = 1 // ContainerResources.name
	ctrDevices         = 2 // ContainerResources.devices
	devResourceName    = 1 // ContainerDevices.resource_name
	devDeviceIDs       = 2 // ContainerDevices.device_ids
)

type podResources struct {
	name, namespace string
	devices         []device
}

type device struct{ container, resource, id string }

func encodeGetRequest(name, namespace string) []byte {
	var b []byte
	b = appendString(b, getReqPodName, name)
	b = appendString(b, getReqPodNamespace, namespace)
	return b
}

// The protobuf wire format, the little of it the client needs. It is
// written here rather than imported from google.golang.org/protobuf: its
// encoding/protowire pulls in a package whose initialization reads and
// hashes the executable, about 0.4 ms of every exec of the CNI plugin
// (GODEBUG=inittrace=1), which mostly never talks to the kubelet.

// number is a field number.
type number int32

// Wire types.
const (
	varintType  = 0
	fixed64Type = 1
	bytesType   = 2
	fixed32Type = 5
)

var errWire = errors.New("malformed protobuf")

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendString appends field num as a length-delimited string.
func appendString(b []byte, num number, s string) []byte {
	b = appendVarint(b, uint64(num)<<3|bytesType)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// consumeVarint returns the varint at the start of b and its length; n < 0
// when b does not start with one.
func consumeVarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1 // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// fields calls fn for each length-delimited field of a message and skips
// the others.
// Groups (wire types 3 and 4, which proto3 never writes) are an error.
func fields(b []byte, fn func(num number, v []byte) error) error {
	for len(b) > 0 {
		tag, n := consumeVarint(b)
		if n < 0 || tag>>3 == 0 || tag>>3 > 1<<29-1 {
			return fmt.Errorf("bad tag: %w", errWire)
		}
		b = b[n:]
		num, typ := number(tag>>3), tag&7
		skip := 0
		switch typ {
		case varintType:
			_, skip = consumeVarint(b)
		case fixed64Type:
			skip = 8
		case fixed32Type:
			skip = 4
		case bytesType:
		default:
			return fmt.Errorf("field %d: wire type %d: %w", num, typ, errWire)
		}
		if typ != bytesType {
			if skip < 0 || skip > len(b) {
				return fmt.Errorf("bad field %d: %w", num, errWire)
			}
			b = b[skip:]
			continue
		}
		l, n := consumeVarint(b)
		if n < 0 || l > uint64(len(b)-n) {
			return fmt.Errorf("bad field %d: %w", num, errWire)
		}
		v := b[n : n+int(l)]
		b = b[n+int(l):]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// decodePods reads the pod_resources of a Get (one) or List (many) response.
func decodePods(b []byte) ([]podResources, error) {
	var pods []podResources
	err := fields(b, func(num number, v []byte) error {
		if num != respPodResources {
			return nil
		}
		p, err := decodePod(v)
		pods = append(pods, p)
		return err
	})
	return pods, err
}

func decodePod(b []byte) (podResources, error) {
	var p podResources
	err := fields(b, func(num number, v []byte) error {
		switch num {
		case podName:
			p.name = string(v)
		case podNamespace:
			p.namespace = string(v)
		case podContainers:
			var ctr string
			return fields(v, func(num number, v []byte) error {
				if num == ctrName {
					ctr = string(v)
				}
				if num != ctrDevices {
					return nil
				}
				var res string
				var ids []string
				err := fields(v, func(num number, v []byte) error {
					switch num {
					case devResourceName:
						res = string(v)
					case devDeviceIDs:
						ids = append(ids, string(v))
					}
					return nil
				})
				for _, id := range ids {
					p.devices = append(p.devices, device{container: ctr, resource: res, id: id})
				}
				return err
			})
		}
		return nil
	})
	return p, err
}
