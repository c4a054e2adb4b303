package dra_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
// record of a claim that exists stays. Before, such a record (an Unprepare
// that never reached the daemon) held its devices until a reboot.
func TestReconcileOrphanedClaims(t *testing.T) {
	kube, rc := startAPIServer(t)
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
}
