package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/internal/reqcount"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// ClaimWatch is the DRA claim reconciler's figures: the real
// dra.ClaimWatcher of Nodes simulated nodes, each with ClaimsPerNode
// prepared claims, and its requests for ResourceClaims per node per
// minute in the steady-state window (reads: LIST, WATCH, GET; writes: any
// other) and while it set its watches up.
type ClaimWatch struct {
	Nodes         int                `json:"nodes"`
	ClaimsPerNode int                `json:"claimsPerNode"`
	Setup         map[string]int     `json:"setupRequests"`
	SteadyPerMin  map[string]float64 `json:"steadyRequestsPerNodeMin"`
}

// claimWatchNodes starts the claim watchers of the first k nodes, each
// with its own client and connection as a daemon has, and waits until all
// claims are watched. The watchers run until ctx ends.
func (c *cluster) claimWatchNodes(ctx context.Context, cp *controlPlane, k, perNode int) (*reqcount.Counter, error) {
	k = min(k, len(c.nodes))
	counter := &reqcount.Counter{Resource: "resourceclaims"}
	for i := range k {
		sn := c.nodes[i]
		ns := nsName(i)
		var recs []claimrecord.Record
		for j := range perNode {
			name := fmt.Sprintf("%s-claim-%d", sn.name, j)
			var cl *resourceapi.ResourceClaim
			err := retry(ctx, func() error {
				var err error
				cl, err = c.kube.ResourceV1().ResourceClaims(ns).Create(ctx,
					&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("create claim: %w", err)
			}
			recs = append(recs, claimrecord.Record{UID: string(cl.UID), Namespace: ns, Name: name, Devices: []claimrecord.Device{}})
		}
		cfg := cp.rest()
		// A daemon's client: no client-side timeout (it would end every
		// watch), its own connection (a custom dialer is not shared by
		// client-go's transport cache), every request counted.
		cfg.Timeout = 0
		cfg.Dial = (&net.Dialer{}).DialContext
		cfg.Wrap(counter.Wrap)
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		w := &dra.ClaimWatcher{Kube: kube, Interval: 30 * time.Second,
			Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			Records: func() ([]claimrecord.Record, error) { return recs, nil },
			Unprepare: func(uid string) error {
				return fmt.Errorf("simulated node %s: claim %s is not gone", sn.name, uid)
			}}
		go w.Run(ctx)
	}
	want := k * perNode
	deadline := time.Now().Add(2 * time.Minute)
	for counter.Counts()["WATCH"] < want {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("claim watches: %d of %d after 2 min", counter.Counts()["WATCH"], want)
		}
		sleep(ctx, 200*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return counter, nil
}

// steadyFigures are the requests between before and after, per node per
// minute of d, with every verb seen present.
func (cw *ClaimWatch) steadyFigures(before, after map[string]int, d time.Duration) {
	cw.SteadyPerMin = map[string]float64{"LIST": 0, "WATCH": 0, "GET": 0}
	for k, v := range after {
		cw.SteadyPerMin[k] = float64(v-before[k]) / float64(cw.Nodes) / d.Minutes()
	}
}

// reads and writes sum the steady figures.
func (cw *ClaimWatch) reads() float64 {
	return cw.SteadyPerMin["LIST"] + cw.SteadyPerMin["WATCH"] + cw.SteadyPerMin["GET"]
}

func (cw *ClaimWatch) writes() float64 {
	w := 0.0
	for k, v := range cw.SteadyPerMin {
		if k != "LIST" && k != "WATCH" && k != "GET" {
			w += v
		}
	}
	return w
}
