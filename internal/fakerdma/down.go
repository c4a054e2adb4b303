package fakerdma

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// DefaultDownFile is the local-node e2e's switch for RDMA netlink that does
// not answer (its faults phase): while it exists, every call of Down fails.
const DefaultDownFile = "/run/kube-rdma-e2e-faulthook/rdma-netlink-down"

// RDMA is what the CNI plugin calls of RDMA netlink (pkg/cni's RDMA).
type RDMA interface {
	NetnsMode(ns netns.NsHandle) (rdma.NetnsMode, error)
	List(ns netns.NsHandle) ([]string, error)
	Move(from netns.NsHandle, name string, to netns.NsHandle) error
	AddRxe(ns netns.NsHandle, name, netdev string) error
	DelSoft(ns netns.NsHandle, name string) error
}

// Down is RDMA netlink that stops answering while File exists, as on a node
// whose driver container unloads and reloads ib_core and mlx5_ib: each call
// then fails with EPROTONOSUPPORT (what a socket of the NETLINK_RDMA family
// gets without ib_core) and RDMA is not called. Otherwise it is RDMA.
type Down struct {
	RDMA RDMA
	File string
}

func (d Down) down() error {
	_, err := os.Stat(d.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("fake rdma: netlink down (%s exists): %w", d.File, unix.EPROTONOSUPPORT)
}

// NetnsMode is RDMA's unless down.
func (d Down) NetnsMode(ns netns.NsHandle) (rdma.NetnsMode, error) {
	if err := d.down(); err != nil {
		return "", err
	}
	return d.RDMA.NetnsMode(ns)
}

// List is RDMA's unless down.
func (d Down) List(ns netns.NsHandle) ([]string, error) {
	if err := d.down(); err != nil {
		return nil, err
	}
	return d.RDMA.List(ns)
}

// Move is RDMA's unless down.
func (d Down) Move(from netns.NsHandle, name string, to netns.NsHandle) error {
	if err := d.down(); err != nil {
		return err
	}
	return d.RDMA.Move(from, name, to)
}

// AddRxe is RDMA's unless down.
func (d Down) AddRxe(ns netns.NsHandle, name, netdev string) error {
	if err := d.down(); err != nil {
		return err
	}
	return d.RDMA.AddRxe(ns, name, netdev)
}

// DelSoft is RDMA's unless down.
func (d Down) DelSoft(ns netns.NsHandle, name string) error {
	if err := d.down(); err != nil {
		return err
	}
	return d.RDMA.DelSoft(ns, name)
}
