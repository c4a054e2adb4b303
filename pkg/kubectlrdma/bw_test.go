package kubectlrdma

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func TestParseBW(t *testing.T) {
	out := `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : mlx5_0
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             97.43              97.41  		   0.185798
---------------------------------------------------------------------------------------
`
	avg, peak, err := parseBW(out)
	if err != nil || avg != 97.41 || peak != 97.43 {
		t.Errorf("parseBW = %v, %v, %v", avg, peak, err)
	}
	if _, _, err := parseBW("Couldn't connect to 10.0.0.1:18515\n"); err == nil {
		t.Error("parseBW accepted output without a result")
	}
}

// retryExecer refuses the first client run as perftest does while the
// server is not listening yet, and records every command.
type retryExecer struct {
	mu        sync.Mutex
	calls     [][]string
	connected chan struct{} // closed when a client run succeeds
}

func (r *retryExecer) Exec(ctx context.Context, _, _, _ string, cmd []string) (string, error) {
	r.mu.Lock()
	r.calls = append(r.calls, cmd)
	n := len(r.calls)
	r.mu.Unlock()
	if cmd[len(cmd)-1] != "10.0.0.1" { // the server serves one client
		select {
		case <-r.connected:
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if n < 3 {
		return " Couldn't connect to 10.0.0.1:18515\n", errors.New("command terminated with exit code 1")
	}
	close(r.connected)
	return perftestClient, nil
}

// RoCE: both sides get -x with their port's RoCE v2 GID index; the client
// is retried until the server listens.
func TestRunPerftestRoCE(t *testing.T) {
	idx := 3
	end := func(name, ip string) bwEnd {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		pod.Status.PodIP = ip
		return bwEnd{pod: pod, container: "main", gidIndex: &idx,
			dev: v1alpha1.Device{Name: "mlx5_3", LinkLayer: "Ethernet"}}
	}
	ex := &retryExecer{connected: make(chan struct{})}
	out, err := runPerftest(context.Background(), ex, end("a", "10.0.0.1"), end("b", "10.0.0.2"), bwFlags{size: 4096, duration: 1, port: 18515})
	if err != nil || out != perftestClient {
		t.Fatalf("runPerftest: %q, %v", out, err)
	}
	clients := 0
	for _, c := range ex.calls {
		if !slices.Contains(c, "-x") || c[slices.Index(c, "-x")+1] != "3" || c[slices.Index(c, "-d")+1] != "mlx5_3" {
			t.Errorf("command %q lacks -d mlx5_3 -x 3", c)
		}
		if c[len(c)-1] == "10.0.0.1" {
			clients++
		}
	}
	if clients < 2 {
		t.Errorf("client ran %d times, want a retry after Couldn't connect", clients)
	}
}
