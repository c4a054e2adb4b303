package dra_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/internal/reqcount"
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
	// The API server ends a watch after --min-request-timeout (1800 s by
	// default) to twice that: 2 s here, so that the steady state below sees
	// the watches made again.
	kube, _, env := startAPIServerEnv(t, "DRADeviceTaints=true", "min-request-timeout=2")
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
	reqs := &reqcount.Counter{Resource: "resourceclaims"}
	rc := chartUser(t, env, kube)
	rc.Wrap(reqs.Wrap)
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

	// The steady state: the kept claim is watched; 80 reconcile intervals
	// (8 s) cost no list, get or write, only a WATCH each time the API
	// server ended the watch (every 2-4 s), from the last resource version.
	pollFor(t, 10*time.Second, "the kept claim watched", func() bool { return reqs.Counts()["WATCH"] >= 1 })
	before := reqs.Counts()
	t.Logf("claim requests for 3 records (2 orphans): %v", before)
	window := 8 * time.Second
	time.Sleep(window)
	after := reqs.Counts()
	rewatches := after["WATCH"] - before["WATCH"]
	delete(before, "WATCH")
	delete(after, "WATCH")
	if !maps.Equal(before, after) {
		t.Errorf("claim requests other than WATCH in %s: %v before, %v after; want none", window, before, after)
	}
	// 8 s holds 2 to 4 watches of 2-4 s; the window's edges and the time to
	// make each again widen it by one.
	if rewatches < 1 || rewatches > 5 {
		t.Errorf("%d WATCHes of the kept claim in %s with the API server ending each after 2-4 s; want 1 to 5", rewatches, window)
	}
	// With the API server's default (1800-3600 s) that is one WATCH per
	// claim per 30-60 min: 8 claims make 0.13-0.27 a minute.
	t.Logf("steady state: %d WATCHes in %s (a watch ended every 2-4 s), nothing else", rewatches, window)
	// Deleted now, its record goes through the watch.
	if err := kube.ResourceV1().ResourceClaims("default").Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 5*time.Second, "the deleted claim's record unprepared", func() bool {
		recs, _, err := claimrecord.ReadAll(claims)
		return err == nil && len(recs) == 0
	})
	if n := reqs.Counts()["GET"]; n != 0 {
		t.Errorf("%d GETs of a claim, want none (a list and a watch per record)", n)
	}
}
