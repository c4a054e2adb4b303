package nodewatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Netlink pokes on every rtnetlink link update (a netdev going down or
// away, a VF count change) and address update (GID slots fill and empty
// with addresses).
type Netlink struct {
	// Namespace to follow; the zero value (or netns.None()) is the
	// daemon's own network namespace.
	Namespace netns.NsHandle
}

// Run follows both subscriptions until ctx ends or one of them fails.
func (n Netlink) Run(ctx context.Context, poke func(Event)) error {
	ns := n.Namespace
	if ns == 0 {
		ns = netns.None()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- rdma.WatchLinks(ctx, ns, func(l string) { poke(Event{Netdev: l}) }) }()
	go func() { errc <- rdma.WatchAddrs(ctx, ns, func(l string) { poke(Event{Netdev: l}) }) }()
	err := <-errc
	cancel()
	return errors.Join(err, <-errc)
}

// ClassDir pokes when entries of <SysRoot>/class/infiniband come or go. On
// sysfs inotify sees nothing; on fixture trees and some container views it
// makes hot-plug immediate. The tick is what the design relies on.
type ClassDir struct {
	SysRoot string
}

// Run watches the directory until ctx ends; a missing directory is not
// watched (nil is returned at once).
func (c ClassDir) Run(ctx context.Context, poke func(Event)) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch rdma class dir: %w", err)
	}
	defer func() { _ = fw.Close() }()
	if err := fw.Add(filepath.Join(c.SysRoot, "class/infiniband")); err != nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			poke(Event{})
		case err := <-fw.Errors:
			return fmt.Errorf("watch rdma class dir: %w", err)
		}
	}
}
