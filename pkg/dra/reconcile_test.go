package dra_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// TestReconcileOrphanedClaims: records of claims gone from a real API server
// (deleted; or deleted and created again under the same name, another UID)
// are unprepared within the reconcile interval, their CDI specs removed; the
// record of a claim that exists stays, watched: no request while nothing
// changes, and its record unprepared once the claim is deleted. The driver
// runs as the chart's user (its DRA rules). Such a record is an Unprepare
// that never reached the daemon, and held its devices until a reboot.
func TestReconcileOrphanedClaims(t *testing.T) {
	kube, _, env := startAPIServerEnv(t, "DRADeviceTaints=true")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	create := func(name string) string {
		c, err := kube.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(c.UID)
	}
	kept := create("kept")
	recreated := create("recreated")
	if err := kube.ResourceV1().ResourceClaims("default").Delete(ctx, "recreated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create("recreated")

	sockDir := pluginDirs(t)
	claims := dra.ClaimsDir(filepath.Join(sockDir, "plugin"))
	cdiDir := t.TempDir()
	for uid, name := range map[string]string{kept: "kept", recreated: "recreated", "0d6b3c1e-0000-4000-8000-00000000dead": "deleted"} {
		if err := claimrecord.Write(claims, claimrecord.Record{UID: uid, Namespace: "default", Name: name, Devices: []claimrecord.Device{}}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cdiDir, "kube-rdma-claim-"+uid+".json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As the chart's daemon: its DRA rules (list and watch of claims).
	var reqs claimRequests
	rc := chartUser(t, env, kube)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reqs.count(rt) })
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: client, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: cdiDir, DevRoot: t.TempDir(), ReconcileInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	pollFor(t, 10*time.Second, "the orphaned records unprepared", func() bool {
		recs, _, err := claimrecord.ReadAll(claims)
		return err == nil && len(recs) == 1
	})
	recs, _, err := claimrecord.ReadAll(claims)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{kept}, []string{recs[0].UID}); diff != "" {
		t.Errorf("records left (-want +got):\n%s", diff)
	}
	for uid, want := range map[string]bool{kept: true, recreated: false, "0d6b3c1e-0000-4000-8000-00000000dead": false} {
		_, err := os.Stat(filepath.Join(cdiDir, "kube-rdma-claim-"+uid+".json"))
		if got := !errors.Is(err, fs.ErrNotExist); got != want {
			t.Errorf("CDI spec of %s there: %v, want %v", uid, got, want)
		}
	}

	// The steady state: the kept claim is watched, and 20 reconcile
	// intervals cost no request.
	pollFor(t, 10*time.Second, "the kept claim watched", func() bool { return reqs.get()["watch"] >= 1 })
	before := reqs.get()
	time.Sleep(20 * 100 * time.Millisecond)
	if after := reqs.get(); !maps.Equal(before, after) {
		t.Errorf("claim requests in 20 reconcile intervals: %v before, %v after; want none", before, after)
	}
	t.Logf("claim requests for 3 records (2 orphans): %v", before)
	// Deleted now, its record goes through the watch.
	if err := kube.ResourceV1().ResourceClaims("default").Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 5*time.Second, "the deleted claim's record unprepared", func() bool {
		recs, _, err := claimrecord.ReadAll(claims)
		return err == nil && len(recs) == 0
	})
	if n := reqs.get()["get"]; n != 0 {
		t.Errorf("%d GETs of a claim, want none (a list and a watch per record)", n)
	}
}

// claimRequests counts the requests for ResourceClaims by kind: "list",
// "watch", "get", "other".
type claimRequests struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *claimRequests) count(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "/resourceclaims") {
			kind := "other"
			switch {
			case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
				kind = "watch"
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/resourceclaims"):
				kind = "list"
			case r.Method == http.MethodGet:
				kind = "get"
			}
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[kind]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *claimRequests) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
