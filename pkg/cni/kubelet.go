package cni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// podResourcesTimeout is an invocation's budget for asking the kubelet:
// every try and every wait between tries together, and never past the
// caller's own deadline. (The runtime execs the plugin without a deadline
// of its own: this is the one bound on how long a pod's ADD waits for the
// kubelet.)
const podResourcesTimeout = 5 * time.Second

// Waits between tries of a transient failure: exponential from retryFirst,
// at most retryMax, each with jitter (half fixed, half random) so that the
// ADDs of a burst of pod starts, all refused by the kubelet's rate limit
// (100 calls a second, bursts of 10), do not come back together. About a
// dozen tries fit in podResourcesTimeout.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = 500 * time.Millisecond
)

// askKubelet connects to conf's PodResources socket and runs call, again
// while it fails transiently (transient) and podResourcesTimeout allows,
// with allocated's error classes. The client starts with List when the
// kubelet said, in an earlier invocation, that it does not serve Get
// (getHint).
func (p *Plugin) askKubelet(ctx context.Context, conf *netconf.Conf, pod podRef, log *slog.Logger,
	call func(context.Context, PodResources) error) error {
	socket := conf.KubeletSocket
	if p.PodResources == nil {
		return fmt.Errorf("%s: %w", socket, errNoKubeletSocket)
	}
	fi, err := os.Stat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", socket, errNoKubeletSocket)
	}
	hint := readGetHint(conf.StateDir, socket, fi)
	c, closeFn, err := p.PodResources(socket, hint.skipGet)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	start := time.Now()
	tries, err := retry(ctx, func() error { return call(ctx, c) })
	if herr := hint.update(c.GetSupport()); herr != nil {
		// Only a lost shortcut: the next invocation asks Get again.
		log.Warn("cannot remember the kubelet's answer to PodResources Get", "err", herr)
	}
	if err == nil {
		if tries > 1 {
			log.Info("kubelet PodResources answered after transient failures", "tries", tries,
				"took", time.Since(start).Round(time.Millisecond))
		}
		return nil
	}
	if tries > 1 || transient(err) {
		n := "1 try"
		if tries > 1 {
			n = fmt.Sprintf("%d tries", tries)
		}
		err = fmt.Errorf("%s in %s, the last: %w", n, time.Since(start).Round(time.Millisecond), err)
	}
	err = fmt.Errorf("ask kubelet %s for the devices of pod %s/%s: %w", socket, pod.Namespace, pod.Name, err)
	if transient(err) {
		err = fmt.Errorf("%w: %w", ErrTryAgain, err)
	}
	return err
}

// retry runs try until it succeeds or fails for good (not transient), or
// until the next wait would end at or past ctx's deadline, or ctx ends. It
// returns the number of tries and the last error.
func retry(ctx context.Context, try func() error) (int, error) {
	wait := retryFirst
	for n := 1; ; n++ {
		err := try()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return n, err
		}
		d := wait/2 + rand.N(wait/2+1)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
			return n, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return n, err
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// transient reports whether a PodResources failure is one that clears up:
// no usable answer (a dropped connection, an answer cut short or garbled)
// or a gRPC status that says so: ResourceExhausted (the kubelet's rate
// limit), and those the client gives a call that got no answer
// (Unavailable: the socket refuses while the kubelet restarts;
// DeadlineExceeded, Canceled). A kubelet that answered with another status,
// or a pod it does not know, is not.
func transient(err error) bool {
	if errors.Is(err, podresources.ErrPodNotFound) {
		return false
	}
	var se *podresources.StatusError
	if !errors.As(err, &se) {
		return true
	}
	switch se.Code {
	case podresources.CodeCanceled, podresources.CodeDeadlineExceeded,
		podresources.CodeResourceExhausted, podresources.CodeUnavailable:
		return true
	}
	return false
}

// getHintFile, in the state dir, remembers across invocations that the
// kubelet does not serve PodResources Get (kubelets 1.27-1.33 by default,
// before 1.27 it has none), so that an ADD asks List once instead of Get
// then List. It holds the identity of the kubelet's socket (its path,
// device, inode and modification time) when the kubelet said so. The
// kubelet removes and re-creates its socket at every start, so a kubelet
// restarted or upgraded (to one that serves Get, perhaps) does not match:
// it is asked Get again, once; the file is removed if it answers, rewritten
// if not. A hint that matched a kubelet which serves Get would still be
// right answers (List answers on every kubelet).
//
// The file is internal to this plugin, written and read by its own
// invocations only: not a contract between processes. A plugin version
// that does not know it ignores it; one that cannot read it asks Get. It is
// written atomically but not fsynced: losing it costs one call.
const getHintFile = "podresources-get-disabled"

// getHint is the hint read for one invocation.
type getHint struct {
	path string
	// id is the socket's identity now ("" if it cannot be read: no hint is
	// used or written); held is the file's content ("": none).
	id, held string
	skipGet  bool
}

func readGetHint(stateDir, socket string, fi os.FileInfo) getHint {
	h := getHint{path: filepath.Join(stateDir, getHintFile)}
	if st, ok := sysStat(fi); ok {
		h.id = fmt.Sprintf("socket=%s dev=%d ino=%d mtime=%d\n", socket, st.Dev, st.Ino, fi.ModTime().UnixNano())
	}
	if b, err := os.ReadFile(h.path); err == nil {
		h.held = string(b)
	}
	h.skipGet = h.id != "" && h.held == h.id
	return h
}

func sysStat(fi os.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// update records what the kubelet answered to Get: the socket's identity
// when it does not serve Get, no file once it does.
func (h getHint) update(s podresources.GetSupport) error {
	switch {
	case s == podresources.GetNotServed && h.id != "" && h.held != h.id:
		if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
			return fmt.Errorf("create state dir: %w", err)
		}
		return atomicfile.Write(h.path, []byte(h.id), 0o600, ".tmp-*")
	case s == podresources.GetServed && h.held != "":
		if err := os.Remove(h.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
