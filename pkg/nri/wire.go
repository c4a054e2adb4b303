package nri

// The NRI messages the plugin reads and writes, encoded here with protowire
// after nri's protocol (github.com/containerd/nri v0.11.0, pkg/api/api.proto:
// the field numbers below are that file's; NRI keeps them stable across
// versions). Why not nri's pkg/api and pkg/stub: pkg/api holds the host side
// of NRI's WASM plugins too (api_host.pb.go, built on every platform but
// wasip1), so importing it links the wazero WASM runtime and go-plugin into
// the daemon (34 packages), with no build tag to leave them out (v0.12.5
// still has them; its nri_no_wasm tag covers pkg/adaptation only). The
// plugin needs five calls and a dozen fields of them. plugin_test.go runs it
// against nri's runtime side (adaptation.Adaptation) and wire_test.go checks
// these encodings against pkg/api's.

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Pod is what the decision reads of a pod sandbox.
type Pod struct {
	ID, Name, Namespace, UID string
	Annotations              map[string]string
	// HostNetwork: the runtime listed the sandbox's namespaces and no
	// network namespace among them (a hostNetwork pod: no CNI ADD runs).
	HostNetwork bool
}

// Device is one Linux device node of a container.
type Device struct {
	Path, Type   string
	Major, Minor int64
}

// Container is what the decision reads of a container being created.
type Container struct {
	Name        string
	Annotations map[string]string
	Devices     []Device
	CDIDevices  []string
}

// KeyValue is one environment variable of an adjustment.
type KeyValue struct{ Key, Value string }

// Rlimit is one POSIX rlimit of an adjustment.
type Rlimit struct {
	Type       string
	Hard, Soft uint64
}

// raw carries an encoded message through ttrpc, whose codec takes
// proto.Message values: an Empty keeps every field it does not know as
// unknown bytes when it is unmarshaled and writes them back when marshaled.
func raw(b []byte) *emptypb.Empty {
	m := &emptypb.Empty{}
	m.ProtoReflect().SetUnknown(b)
	return m
}

func rawBytes(m *emptypb.Empty) []byte { return m.ProtoReflect().GetUnknown() }

var errWireType = errors.New("unexpected wire type")

// field is one decoded field: v for length-delimited ones, x for varints.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   []byte
	x   uint64
}

// str and bytes return the field's value when it is length-delimited.
func (f field) str() (string, error) {
	b, err := f.bytes()
	return string(b), err
}

func (f field) bytes() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("field %d: %w %d", f.num, errWireType, f.typ)
	}
	return f.v, nil
}

func (f field) varint() (uint64, error) {
	if f.typ != protowire.VarintType {
		return 0, fmt.Errorf("field %d: %w %d", f.num, errWireType, f.typ)
	}
	return f.x, nil
}

// walk calls fn for each field of the message b, skipping none: fn ignores
// the numbers it does not read.
func walk(b []byte, fn func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			f.v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			f.x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// mapEntry adds one map<string, string> entry (key 1, value 2) to m.
func mapEntry(m *map[string]string, f field) error {
	b, err := f.bytes()
	if err != nil {
		return err
	}
	var k, v string
	err = walk(b, func(e field) error {
		var err error
		switch e.num {
		case 1:
			k, err = e.str()
		case 2:
			v, err = e.str()
		}
		return err
	})
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
	return err
}

// decodePod reads a PodSandbox: id 1, name 2, uid 3, namespace 4,
// annotations 6, linux 8 (LinuxPodSandbox: namespaces 5, LinuxNamespace:
// type 1).
func decodePod(b []byte) (Pod, error) {
	var p Pod
	var namespaces, network bool
	err := walk(b, func(f field) error {
		if f.num == 8 {
			linux, err := f.bytes()
			if err != nil {
				return err
			}
			return walk(linux, func(f field) error {
				if f.num != 5 {
					return nil
				}
				ns, err := f.bytes()
				if err != nil {
					return err
				}
				namespaces = true
				return walk(ns, func(f field) error {
					if f.num != 1 {
						return nil
					}
					t, err := f.str()
					network = network || t == "network"
					return err
				})
			})
		}
		var err error
		switch f.num {
		case 1:
			p.ID, err = f.str()
		case 2:
			p.Name, err = f.str()
		case 3:
			p.UID, err = f.str()
		case 4:
			p.Namespace, err = f.str()
		case 6:
			err = mapEntry(&p.Annotations, f)
		}
		return err
	})
	if err != nil {
		return Pod{}, fmt.Errorf("decode pod sandbox: %w", err)
	}
	p.HostNetwork = namespaces && !network
	return p, nil
}

// decodeContainer reads a Container: name 3, annotations 6, linux 11
// (LinuxContainer: devices 2), CDI_devices 20 (CDIDevice: name 1).
func decodeContainer(b []byte) (Container, error) {
	var c Container
	err := walk(b, func(f field) error {
		switch f.num {
		case 3:
			var err error
			c.Name, err = f.str()
			return err
		case 6:
			return mapEntry(&c.Annotations, f)
		case 11:
			linux, err := f.bytes()
			if err != nil {
				return err
			}
			return walk(linux, func(f field) error {
				if f.num != 2 {
					return nil
				}
				d, err := f.bytes()
				if err != nil {
					return err
				}
				dev, err := decodeDevice(d)
				c.Devices = append(c.Devices, dev)
				return err
			})
		case 20:
			cdi, err := f.bytes()
			if err != nil {
				return err
			}
			var name string
			err = walk(cdi, func(f field) error {
				var err error
				if f.num == 1 {
					name, err = f.str()
				}
				return err
			})
			c.CDIDevices = append(c.CDIDevices, name)
			return err
		}
		return nil
	})
	if err != nil {
		return Container{}, fmt.Errorf("decode container: %w", err)
	}
	return c, nil
}

// decodeDevice reads a LinuxDevice: path 1, type 2, major 3, minor 4 (int64).
func decodeDevice(b []byte) (Device, error) {
	var d Device
	err := walk(b, func(f field) error {
		var err error
		var x uint64
		switch f.num {
		case 1:
			d.Path, err = f.str()
		case 2:
			d.Type, err = f.str()
		case 3:
			x, err = f.varint()
			d.Major = int64(x)
		case 4:
			x, err = f.varint()
			d.Minor = int64(x)
		}
		return err
	})
	return d, err
}

// Messages of the NRI protocol, by name: what each request carries, what
// each response is made of.

// registerPluginRequest: plugin_name 1, plugin_idx 2.
func registerPluginRequest(name, idx string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, idx)
}

// configureRequest: runtime_name 2, runtime_version 3.
func configureRequest(b []byte) (runtime, version string, err error) {
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 2:
			runtime, err = f.str()
		case 3:
			version, err = f.str()
		}
		return err
	})
	return runtime, version, err
}

// configureResponse: events 2, the mask of the events the plugin takes
// (bit e-1 for event e of api.proto's enum Event).
func configureResponse(events ...int) []byte {
	var mask uint64
	for _, e := range events {
		mask |= 1 << (e - 1)
	}
	b := protowire.AppendTag(nil, 2, protowire.VarintType)
	return protowire.AppendVarint(b, mask)
}

// Events of api.proto's enum Event the plugin subscribes to.
const (
	eventRemovePodSandbox = 3
	eventCreateContainer  = 4
)

// synchronizeMore reads SynchronizeRequest's more (3): the runtime sends
// the running pods and containers in several requests when they are many.
func synchronizeMore(b []byte) (bool, error) {
	var more bool
	err := walk(b, func(f field) error {
		if f.num != 3 {
			return nil
		}
		x, err := f.varint()
		more = x != 0
		return err
	})
	return more, err
}

// synchronizeResponse: no updates; more 2 echoes the request's.
func synchronizeResponse(more bool) []byte {
	if !more {
		return nil
	}
	b := protowire.AppendTag(nil, 2, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// createContainerRequest: pod 1, container 2.
func createContainerRequest(b []byte) (Pod, Container, error) {
	var pod Pod
	var ctr Container
	err := walk(b, func(f field) error {
		var err error
		var v []byte
		switch f.num {
		case 1:
			if v, err = f.bytes(); err == nil {
				pod, err = decodePod(v)
			}
		case 2:
			if v, err = f.bytes(); err == nil {
				ctr, err = decodeContainer(v)
			}
		}
		return err
	})
	return pod, ctr, err
}

// createContainerResponse: adjust 1, a ContainerAdjustment with env 4
// (KeyValue: key 1, value 2; the runtime replaces a variable of that name)
// and rlimits 7 (POSIXRlimit: type 1, hard 2, soft 3); no adjustment when
// there are neither.
func createContainerResponse(rlimits []Rlimit, env []KeyValue) []byte {
	if len(rlimits) == 0 && len(env) == 0 {
		return nil
	}
	var adj []byte
	for _, kv := range env {
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv.Key)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv.Value)
		adj = protowire.AppendTag(adj, 4, protowire.BytesType)
		adj = protowire.AppendBytes(adj, e)
	}
	for _, r := range rlimits {
		l := protowire.AppendTag(nil, 1, protowire.BytesType)
		l = protowire.AppendString(l, r.Type)
		l = protowire.AppendTag(l, 2, protowire.VarintType)
		l = protowire.AppendVarint(l, r.Hard)
		l = protowire.AppendTag(l, 3, protowire.VarintType)
		l = protowire.AppendVarint(l, r.Soft)
		adj = protowire.AppendTag(adj, 7, protowire.BytesType)
		adj = protowire.AppendBytes(adj, l)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, adj)
}

// stateChangeEvent: event 1, pod 2.
func stateChangeEvent(b []byte) (event int, pod Pod, err error) {
	err = walk(b, func(f field) error {
		var err error
		var x uint64
		var v []byte
		switch f.num {
		case 1:
			x, err = f.varint()
			event = int(x)
		case 2:
			if v, err = f.bytes(); err == nil {
				pod, err = decodePod(v)
			}
		}
		return err
	})
	return event, pod, err
}
