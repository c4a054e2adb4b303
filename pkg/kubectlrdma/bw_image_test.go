package kubectlrdma

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// fakeDebugger adds ephemeral containers to the world's pods and gives each
// the state a kubelet would report: running, or waiting for reason.
type fakeDebugger struct {
	f      *fakeCluster
	reason string // "" runs the container
	err    error  // the API server's answer to the update
	mu     sync.Mutex
	added  map[string][]corev1.EphemeralContainer // pod -> containers
}

func (d *fakeDebugger) newDebugger(genericclioptions.RESTClientGetter) (Debugger, error) {
	return d, nil
}

func (d *fakeDebugger) AddEphemeral(_ context.Context, ns, pod string, c corev1.EphemeralContainer) error {
	if d.err != nil {
		return ephemeralError(ns, pod, c.Name, d.err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.f.w.pods {
		p := &d.f.w.pods[i]
		if p.Namespace != ns || p.Name != pod {
			continue
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, c)
		st := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		if d.reason != "" {
			st = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: d.reason, Message: "pull access denied"}}
		}
		p.Status.EphemeralContainerStatuses = append(p.Status.EphemeralContainerStatuses,
			corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: st})
		if d.added == nil {
			d.added = map[string][]corev1.EphemeralContainer{}
		}
		d.added[pod] = append(d.added[pod], c)
		return nil
	}
	return ephemeralError(ns, pod, c.Name, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod))
}

// imageExecer is a container whose own image has no perftest: only bw's
// ephemeral containers (rdma-bw-*) answer like one that has. It records
// every container a command ran in, and the done marks.
type imageExecer struct {
	recordingExecer
	mu         sync.Mutex
	containers map[string][]string // pod -> the containers of its execs
	done       []string            // pod/container of each touch of bwDoneFile
}

func (x *imageExecer) Exec(ctx context.Context, ns, pod, container string, cmd []string) (string, error) {
	x.mu.Lock()
	x.containers[pod] = append(x.containers[pod], container)
	if slices.Equal(cmd, []string{"touch", bwDoneFile}) {
		x.done = append(x.done, pod+"/"+container)
		x.mu.Unlock()
		return "", nil
	}
	x.mu.Unlock()
	if !strings.HasPrefix(container, "rdma-bw-") {
		return fakeExecer{probe: x.probe, gids: x.gids}.Exec(ctx, ns, pod, container, cmd) // perftest no
	}
	return x.recordingExecer.Exec(ctx, ns, pod, container, cmd)
}

func newImageExecer() *imageExecer {
	return &imageExecer{containers: map[string][]string{}, recordingExecer: recordingExecer{perft: map[string][]string{}, fakeExecer: fakeExecer{
		probe:    map[string]string{"e2e/a": "", "e2e/b": ""},
		perftest: map[string]bool{"e2e/a": true, "e2e/b": true},
		timeout:  map[string]bool{"e2e/a": true, "e2e/b": true},
		gids:     map[string]string{"e2e/a": gidsA, "e2e/b": gidsA},
	}}}
}

// bw --image: each pod gets one privileged ephemeral container of the
// image, every command of the run goes to it (never to the pod's own
// container, whose image has no perftest), and bw ends it when done. The
// same pods without --image fail on their images.
func TestBWImage(t *testing.T) {
	f := &fakeCluster{w: rxeWorld("rxe0", "rxe0")}
	dbg := &fakeDebugger{f: f}
	ex := newImageExecer()
	var out, errOut bytes.Buffer
	o := Options{
		Streams:     genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		NewCluster:  f.newCluster,
		NewExecer:   func(genericclioptions.RESTClientGetter) (Execer, error) { return ex, nil },
		NewDebugger: dbg.newDebugger,
	}
	if code := Execute(context.Background(), []string{"bw", "-n", "e2e", "a", "b"}, o); code == 0 || !strings.Contains(errOut.String(), ErrNoPerftest.Error()) {
		t.Fatalf("without --image: exit %d, stderr %q; want the pods' images refused", code, errOut.String())
	}
	if len(dbg.added) != 0 {
		t.Fatalf("without --image: ephemeral containers added: %v", dbg.added)
	}
	out.Reset()
	errOut.Reset()
	ex.containers = map[string][]string{}
	const image = "registry.example/perftest:1"
	if code := Execute(context.Background(), []string{"bw", "-n", "e2e", "a", "b", "--image", image}, o); code != 0 {
		t.Fatalf("--image: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "Gb/sec average") {
		t.Errorf("output lacks the bandwidth:\n%s", out.String())
	}
	for _, p := range []string{"a", "b"} {
		added := dbg.added[p]
		if len(added) != 1 {
			t.Fatalf("pod %s: %d ephemeral containers added, want 1", p, len(added))
		}
		c := added[0]
		if c.Image != image || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged ||
			!strings.HasPrefix(c.Name, "rdma-bw-") || len(c.Command) != 3 || c.Command[0] != "sh" || !strings.Contains(c.Command[2], bwDoneFile) {
			t.Errorf("pod %s: ephemeral container %+v, want a privileged rdma-bw-* of %s looping until %s", p, c, image, bwDoneFile)
		}
		for _, got := range ex.containers[p] {
			if got != c.Name {
				t.Errorf("pod %s: a command ran in container %q, want every one in %s", p, got, c.Name)
			}
		}
		if len(ex.perft[p]) == 0 {
			t.Errorf("pod %s: no ib_write_bw ran", p)
		}
		if !slices.Contains(ex.done, p+"/"+c.Name) {
			t.Errorf("pod %s: bw did not end %s (done marks %v)", p, c.Name, ex.done)
		}
	}
	if want := "ephemeral container rdma-bw-"; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q lacks %q", errOut.String(), want)
	}
}

// bw --image fails at once, naming the reason, when its container cannot
// start (an image that cannot be pulled), and runs nothing; a refused
// update names what --image needs; a container that never starts is a
// timeout that says its last state.
func TestBWImageErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a",
		errors.New(`violates PodSecurity "baseline:latest": privileged (container "rdma-bw-x" must not set securityContext.privileged=true)`))
	tests := []struct {
		name   string
		reason string
		err    error
		want   error
		say    []string
	}{
		{"image not pulled", "ErrImagePull", nil, ErrBWContainer, []string{"ErrImagePull: pull access denied", "registry.example/none:1"}},
		{"still pulling", "ContainerCreating", nil, ErrBWContainer, []string{"not running after", "ContainerCreating"}},
		{"pod security", "", forbidden, ErrForbidden, []string{"PodSecurity", "pods/ephemeralcontainers", "privileged"}},
	}
	defer func(w, p time.Duration) { bwContainerWait, bwStatePoll = w, p }(bwContainerWait, bwStatePoll)
	bwContainerWait, bwStatePoll = 50*time.Millisecond, 10*time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeCluster{w: rxeWorld("rxe0", "rxe0")}
			dbg := &fakeDebugger{f: f, reason: tc.reason, err: tc.err}
			ex := newImageExecer()
			o := Options{Streams: genericiooptions.NewTestIOStreamsDiscard(), NewCluster: f.newCluster,
				NewExecer: func(genericclioptions.RESTClientGetter) (Execer, error) { return ex, nil }, NewDebugger: dbg.newDebugger}
			root := NewRootCommand(&o)
			root.SetArgs([]string{"bw", "-n", "e2e", "a", "b", "--image", "registry.example/none:1"})
			err := root.ExecuteContext(context.Background())
			if !errors.Is(err, tc.want) {
				t.Fatalf("bw: %v, want %v", err, tc.want)
			}
			for _, s := range tc.say {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if n := len(ex.perft); n != 0 {
				t.Errorf("ib_write_bw ran in %d pods", n)
			}
			if len(dbg.added["b"]) != 0 {
				t.Errorf("a container was added to the client's pod after the server's failed: %v", dbg.added["b"])
			}
		})
	}
}
