package podresources_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// frame is one raw HTTP/2 frame, as a hostile peer writes it.
func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	h := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[5:], stream)
	return append(h, payload...)
}

// hostile serves raw bytes on a unix socket: to each connection it writes
// first, then rest over and over until the client hangs up. It reads and
// drops what the client sends.
func hostile(t *testing.T, first, rest []byte) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				hungUp := make(chan struct{})
				go func() { _, _ = io.Copy(io.Discard, c); close(hungUp) }()
				if _, err := c.Write(first); err != nil {
					return
				}
				for len(rest) > 0 {
					if _, err := c.Write(rest); err != nil {
						return
					}
				}
				<-hungUp
			}()
		}
	}()
	return sock
}

// TestH2Limits: against a peer that sends more than the client advertised,
// the call fails with ErrLimit well within its deadline, having allocated
// under 16 MiB.
func TestH2Limits(t *testing.T) {
	settings := frame(0x4, 0, 0, nil)
	fill := bytes.Repeat([]byte{0x82}, 16<<10) // ":method: GET", indexed, 16 KiB of it

	// A literal field (new name) whose value claims 1 GiB.
	huge := []byte{0x00, 0x01, 'x', 0x7f}
	for v := uint64(1<<30 - 127); v >= 0x80; v >>= 7 {
		huge = append(huge, byte(v)|0x80)
	}
	huge = append(huge, 0x01, 'y', 'y')

	// One 4 KB field added to the dynamic table, then named 16K times: a
	// 16 KiB block that decodes to 64 MiB of fields.
	var bomb bytes.Buffer
	enc := hpack.NewEncoder(&bomb)
	_ = enc.WriteField(hpack.HeaderField{Name: "x", Value: strings.Repeat("y", 4000)})
	for bomb.Len() < 16<<10-1 {
		bomb.WriteByte(0x80 | 62) // dynamic table entry 1
	}

	for _, tc := range []struct {
		name        string
		first, rest []byte
	}{
		{"endless CONTINUATION", cat(settings, frame(0x1, 0, 1, fill)), frame(0x9, 0, 1, fill)},
		{"oversized frame", cat(settings, []byte{0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1}), bytes.Repeat([]byte{0}, 64<<10)},
		{"frame one byte over 16 KiB", cat(settings, frame(0x0, 0, 1, make([]byte, 16<<10+1))), nil},
		{"huge HPACK string", cat(settings, frame(0x1, 0x4, 1, huge)), bytes.Repeat([]byte{'y'}, 64<<10)},
		{"header list bomb", cat(settings, frame(0x1, 0x4, 1, bomb.Bytes())), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := hostile(t, tc.first, tc.rest)
			c := podresources.NewH2Client(sock)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()

			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := c.List(ctx)
			took := time.Since(start)
			runtime.ReadMemStats(&after)

			if !errors.Is(err, podresources.ErrLimit) {
				t.Errorf("List: err = %v, want ErrLimit", err)
			}
			if took > time.Second {
				t.Errorf("List took %v, want it to fail at once, well within its 2 s deadline", took)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Errorf("List allocated %d MiB, want under 16", alloc>>20)
			}
			t.Logf("%v after %v, %d KiB allocated", err, took.Round(time.Microsecond), (after.TotalAlloc-before.TotalAlloc)>>10)
		})
	}
}

func manyIDs(n int) []podresources.ContainerDevices {
	ctrs := make([]podresources.ContainerDevices, 4)
	for i := range ctrs {
		ctrs[i].Resource = "rdma/nic"
	}
	for i := range n {
		// Every ID twice, in two containers.
		id := "dev-" + strconv.Itoa(i/2)
		ctrs[i%4].DeviceIDs = append(ctrs[i%4].DeviceIDs, id)
	}
	return ctrs
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// TestByResourceLinear: ByResource grows linearly with the IDs, not
// quadratically (a list lookup per ID takes 23 s for 80k IDs).
// The two sizes are timed in the same run, each the fastest of seven after
// a GC, so the ratio holds on a loaded machine where an absolute time does
// not (under load the larger size can take 54 ms, past an "under 50 ms").
// They are 40x apart so that the bound sits far from both outcomes: linear
// is 40, and maps that outgrow the CPU's caches can make 10x the IDs take up
// to 48x as long (so a 40x bound on a 10x step is too tight); quadratic is
// 1,600. The bound is 400.
func TestByResourceLinear(t *testing.T) {
	fastest := func(n int) time.Duration {
		ctrs := manyIDs(n)
		best := time.Duration(1<<63 - 1)
		for range 7 {
			runtime.GC()
			start := time.Now()
			podresources.ByResource(ctrs)
			best = min(best, time.Since(start))
		}
		return best
	}
	small, large := fastest(2_000), fastest(80_000)
	ratio := float64(large) / float64(max(small, time.Microsecond))
	t.Logf("ByResource: 2k IDs %v, 80k IDs %v, ratio %.1f (linear 40, quadratic 1,600)", small, large, ratio)
	if ratio > 400 {
		t.Errorf("80k IDs took %.1f times as long as 2k (%v vs %v): not linear", ratio, large, small)
	}
	ctrs := manyIDs(80_000)
	out := podresources.ByResource(ctrs)
	seen := map[string]bool{}
	for _, c := range ctrs {
		for _, id := range c.DeviceIDs {
			seen[id] = true
		}
	}
	if got := len(out["rdma/nic"]); got != len(seen) {
		t.Errorf("ByResource kept %d IDs, want the %d distinct ones", got, len(seen))
	}
}

func BenchmarkByResource80k(b *testing.B) {
	ctrs := manyIDs(80_000)
	for b.Loop() {
		podresources.ByResource(ctrs)
	}
}
