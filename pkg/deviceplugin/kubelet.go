package deviceplugin

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// kubeletEvent says which pool servers should check their socket and
// registration: all of them when kubelet.sock was created (a kubelet
// (re)start: they serve again and register), one when its socket was
// created, removed or renamed (a kubelet restart clears the directory; the
// new pod of a DaemonSet update binds the path, which supersedes this
// process's pool).
type kubeletEvent struct {
	all    bool
	socket string
}

// kubeletWatcher watches the kubelet's device plugin directory for the
// events that mean a pool must serve or register again. It is shared by
// every pool server; Plugin.Start's forwarder passes its events on.
type kubeletWatcher struct {
	fw     *fsnotify.Watcher
	events chan kubeletEvent
	done   chan struct{}
}

func newKubeletWatcher(dir string, log *slog.Logger) (*kubeletWatcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch kubelet dir: %w", err)
	}
	if err := fw.Add(dir); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("watch kubelet dir: %w", err)
	}
	k := &kubeletWatcher{fw: fw, events: make(chan kubeletEvent, 16), done: make(chan struct{})}
	go k.run(log)
	return k, nil
}

func (k *kubeletWatcher) run(log *slog.Logger) {
	defer close(k.done)
	for {
		select {
		case ev, ok := <-k.fw.Events:
			if !ok {
				return
			}
			base := filepath.Base(ev.Name)
			switch {
			case base == KubeletSocket && ev.Has(fsnotify.Create):
				log.Info("kubelet socket created; every pool registers")
				k.send(kubeletEvent{all: true})
			case ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
				k.send(kubeletEvent{socket: base})
			}
		case err, ok := <-k.fw.Errors:
			if !ok {
				return
			}
			log.Warn("kubelet dir watcher", "err", err)
			k.send(kubeletEvent{all: true}) // events may have been lost
		}
	}
}

// send blocks until the forwarder (or close) takes the event.
func (k *kubeletWatcher) send(ev kubeletEvent) { k.events <- ev }

func (k *kubeletWatcher) close() {
	_ = k.fw.Close()
	// Drain so run, blocked on a send, can see the closed watcher.
	for {
		select {
		case <-k.done:
			return
		case <-k.events:
		}
	}
}
