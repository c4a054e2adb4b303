package kubectlrdma

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func TestEscapeString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mlx5_0", "mlx5_0"},
		{"", ""},
		{"Grüße, 東京, 🚀 a\\b", "Grüße, 東京, 🚀 a\\b"},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"\x1b[2J", `\x1b[2J`},
		{"a\rb\nc\td", `a\rb\nc\td`},
		{"\x00\x7f", `\x00\x7f`},
		{"\u0085\u009b31m", `\u0085\u009b31m`}, // C1: NEL, CSI
		{"\u202egnp.exe", `\u202egnp.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"bad\xff\xfeutf8", `bad\xff\xfeutf8`},
		{"cut\xe2\x82", `cut\xe2\x82`},
	} {
		if got := escapeString(tc.in); got != tc.want {
			t.Errorf("escapeString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEscapeAll(t *testing.T) {
	type inner struct {
		S  string
		P  *string
		L  []string
		M  map[string]string
		I  any
		un string
	}
	p := "p\x1b"
	v := &inner{S: "s\x1b", P: &p, L: []string{"l\x1b"}, M: map[string]string{"k\x1b": "v\x1b"}, I: "i\x1b", un: "u\x1b"}
	escapeAll(v)
	want := inner{S: `s\x1b`, L: []string{`l\x1b`}, M: map[string]string{`k\x1b`: `v\x1b`}, I: `i\x1b`, un: "u\x1b"}
	if *v.P != `p\x1b` {
		t.Errorf("pointer: %q", *v.P)
	}
	v.P = nil
	if diff := cmp.Diff(want, *v, cmp.AllowUnexported(inner{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// hostile is what a compromised node's daemon can write into its own state.
var hostile = []string{"\x1b]0;pwned\x07", "\x1b[2J", "\r", "\u202e", "\xff\xfe", "\n"}

// hostileWorld is the golden world plus evil-1, whose daemon writes escape
// sequences into every string of its state, and a pod there whose
// container prints them too.
func hostileWorld(t *testing.T) (*world, fakeExecer) {
	w := newWorld(t)
	s := w.states[1].DeepCopy() // gpu-a: devices, GPUs, pools, allocations, CNI, claims
	s.Name, s.Spec.NodeName = "evil-1", "evil-1"
	st := &s.Status
	bad := func(i int, v string) string { return v + hostile[i%len(hostile)] }
	st.DaemonVersion = bad(0, "v6.6.6")
	st.RDMANetnsMode = bad(1, "exclusive")
	st.ConfigErrors = append(st.ConfigErrors, hostile...)
	for i := range st.Devices {
		d := &st.Devices[i]
		d.Kind, d.LinkLayer, d.PCIeRoot = bad(i, d.Kind), bad(i+1, d.LinkLayer), bad(i+2, d.PCIeRoot)
		for j := range d.Netdevs {
			d.Netdevs[j] = bad(i+j, d.Netdevs[j])
		}
		for j := range d.Ports {
			pt := &d.Ports[j]
			pt.State, pt.PhysState, pt.Rate, pt.Netdev = bad(i, pt.State), bad(i+1, pt.PhysState), bad(i+2, pt.Rate), bad(i+3, pt.Netdev)
		}
	}
	st.Devices[0].Healthy = false // its name in doctor's and topo's warnings
	st.Devices[0].Name = bad(0, st.Devices[0].Name)
	for i := range st.GPUs {
		st.GPUs[i].UUID = bad(i, st.GPUs[i].UUID)
	}
	for i := range st.Affinity {
		for j := range st.Affinity[i].Levels {
			st.Affinity[i].Levels[j] = bad(i+j, st.Affinity[i].Levels[j])
		}
	}
	for i := range st.Allocations {
		a := &st.Allocations[i]
		a.Pod = "evil-0"
		for j := range a.Netdevs {
			a.Netdevs[j] = bad(j+4, a.Netdevs[j])
		}
		for j := range a.Attached {
			at := &a.Attached[j]
			at.PodNetdev, at.Network, at.Netdev = bad(j, at.PodNetdev), bad(j+1, at.Network), bad(j+3, at.Netdev)
		}
	}
	for i := range st.Claims {
		c := &st.Claims[i]
		c.Namespace, c.Name = bad(i, c.Namespace), bad(i+1, c.Name)
		for j := range c.Devices {
			if i == 1 { // the others' names stay those of a device: nodes -o wide's HOLDERS shows the claim
				c.Devices[j].RDMADevice = bad(i+j+2, c.Devices[j].RDMADevice)
			}
		}
		c.Pods = append(c.Pods, v1alpha1.ClaimPod{UID: "pod-uid-evil-0", Name: bad(i+3, "evil-0")})
	}
	st.Claims[1].Namespace = "train" // evil-0's: its pods row shows the claim
	st.Allocations = st.Allocations[:1]
	st.Pools[0].Devices = append(st.Pools[0].Devices, bad(2, "mlx5_9"))
	st.CNI.ChainedPool = bad(3, "ib")
	st.Summary.Table = v1alpha1.NewSummaryTable(st) // what nodes prints without -o wide
	w.states = append(w.states, *s)
	w.nodes = append(w.nodes, node("evil-1", map[string]int64{ibRes: 2}))
	// Its kubelet (compromised too) writes them into the pod's device health.
	w.pods = append(w.pods, withHealth(withUID(pod("train", "evil-0", "evil-1", "Running", map[string]int64{ibRes: 1}), "pod-uid-evil-0"),
		health(ibRes, bad(1, "0000:9a:00.0"), "Unhealthy", bad(0, "port down"))))
	ex := fakeExecer{probe: maps.Clone(containers.probe)}
	ex.probe["train/evil-0"] = "dev /dev/infiniband/uverbs1\x1b[2J ok\nmemlock 64\x1b]0;pwned\x07\nhca =mlx5_1\u202e\ngidindex <unset>\r\n" +
		"netdev net1\xff up\naddr net1 inet 10.77.0.5/24\nrdma mlx5_1 present\n"
	return w, ex
}

// Every human output of a state whose strings carry terminal escapes shows
// them escaped (golden), and no output, json and yaml included, carries a
// raw control character.
func TestHostileStrings(t *testing.T) {
	w, ex := hostileWorld(t)
	f := &fakeCluster{w: w}
	run := func(args []string) string {
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), args, Options{
			Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
			NewCluster: f.newCluster,
			NewExecer:  ex.newExecer,
			Now:        func() time.Time { return now },
		})
		return fmt.Sprintf("$ kubectl rdma %s\n%s--- stderr\n%s--- exit %d\n", strings.Join(args, " "), out.String(), errOut.String(), code)
	}
	for _, tc := range []goldenCase{
		{"hostile-nodes", []string{"nodes"}},
		{"hostile-nodes-wide", []string{"nodes", "-o", "wide"}},
		{"hostile-pods-wide", []string{"pods", "-n", "train", "-o", "wide"}},
		{"hostile-topo", []string{"topo", "evil-1"}},
		{"hostile-doctor-node", []string{"doctor", "node/evil-1"}},
		{"hostile-doctor-pod", []string{"doctor", "-n", "train", "evil-0"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got := run(tc.args)
			checkGolden(t, tc.golden, got)
			assertNoRawControl(t, got, "\n\t")
			for _, want := range []string{`\x1b`} {
				if !strings.Contains(got, want) {
					t.Errorf("%s: no %s: the hostile strings are not printed", tc.golden, want)
				}
			}
		})
	}
	// Encoders: encoding/json writes C0 characters (ESC, BEL, CR) as \u00XX
	// and invalid UTF-8 as U+FFFD; the YAML emitter double-quotes and
	// escapes them.
	for _, args := range [][]string{
		{"nodes", "-o", "json"}, {"nodes", "-o", "yaml"}, {"pods", "-n", "train", "-o", "json"},
		{"pods", "-n", "train", "-o", "yaml"}, {"topo", "evil-1", "-o", "json"}, {"topo", "evil-1", "-o", "yaml"},
		{"doctor", "-n", "train", "evil-0", "-o", "json"}, {"doctor", "-n", "train", "evil-0", "-o", "yaml"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			got := run(args)
			if !strings.Contains(got, "evil") {
				t.Fatalf("no evil-1 in the output:\n%s", got)
			}
			assertNoRawControl(t, got, "\n")
		})
	}
	// The escapes decode back to the strings the daemon wrote (invalid
	// UTF-8 aside: JSON has no way to carry it, it reads back as U+FFFD).
	for _, format := range []string{outJSON, outYAML} {
		t.Run("nodes -o "+format+" decodes to the same strings", func(t *testing.T) {
			var out, errOut bytes.Buffer
			Execute(context.Background(), []string{"nodes", "-o", format}, Options{
				Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
				NewCluster: f.newCluster,
				Now:        func() time.Time { return now },
			})
			var l v1alpha1.RDMANodeStateList
			decodeStrict(t, format, out.String(), &l)
			want := w.states[len(w.states)-1].Status
			for _, s := range l.Items {
				if s.Name != "evil-1" {
					continue
				}
				got := s.Status
				if diff := cmp.Diff([]string{want.DaemonVersion, want.RDMANetnsMode, want.Devices[3].Kind, want.Devices[0].Name, want.ConfigErrors[5]},
					[]string{got.DaemonVersion, got.RDMANetnsMode, got.Devices[3].Kind, got.Devices[0].Name, got.ConfigErrors[5]}); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			t.Fatalf("no evil-1 in %s", out.String())
		})
	}
}

// assertNoRawControl fails on a control or format character (ESC, BEL, CR,
// C1, U+202E, ...) or invalid UTF-8 in out, but for those in allowed.
func assertNoRawControl(t *testing.T, out, allowed string) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			t.Errorf("invalid UTF-8 at byte %d: %q", i, out[max(0, i-20):min(len(out), i+20)])
		} else if r != utf8.RuneError && unsafeRune(r) && !strings.ContainsRune(allowed, r) {
			t.Errorf("raw %U at byte %d: %q", r, i, out[max(0, i-20):min(len(out), i+20)])
		}
	}
}
