package podres

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
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
	b = protowire.AppendTag(b, getReqPodName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, getReqPodNamespace, protowire.BytesType)
	b = protowire.AppendString(b, namespace)
	return b
}

// fields calls fn for each length-delimited field of a message and skips
// the others.
func fields(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("bad field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("bad field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// decodePods reads the pod_resources of a Get (one) or List (many) response.
func decodePods(b []byte) ([]podResources, error) {
	var pods []podResources
	err := fields(b, func(num protowire.Number, v []byte) error {
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
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case podName:
			p.name = string(v)
		case podNamespace:
			p.namespace = string(v)
		case podContainers:
			var ctr string
			return fields(v, func(num protowire.Number, v []byte) error {
				if num == ctrName {
					ctr = string(v)
				}
				if num != ctrDevices {
					return nil
				}
				var res string
				var ids []string
				err := fields(v, func(num protowire.Number, v []byte) error {
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
