package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// TestDRAClaims: the detector and the NRI plugin read the claim records
// of --dra-plugin-dir with --dra only; a directory not there yet holds no
// claim, a torn record is moved aside and costs only itself.
func TestDRAClaims(t *testing.T) {
	if _, ok := draClaims(runConfig{}); ok {
		t.Error("claim records without --dra")
	}
	var cfg runConfig
	cfg.dra.enabled, cfg.dra.pluginDir = true, filepath.Join(t.TempDir(), "plugin")
	c, ok := draClaims(cfg)
	if !ok || c.dir != dra.ClaimsDir(cfg.dra.pluginDir) {
		t.Fatalf("draClaims = %+v, %v; want the records of %s", c, ok, dra.ClaimsDir(cfg.dra.pluginDir))
	}
	if recs, err := c.Claims(); err != nil || len(recs) != 0 {
		t.Errorf("Claims of a directory not there yet = %v, %v; want none", recs, err)
	}
	r := claimrecord.Record{UID: "c1", Namespace: "ns", Name: "nic", PodUIDs: []string{"p1"}, Devices: []claimrecord.Device{{Request: "nic", Pool: "n1/roce", Device: "d", RDMA: "mlx5_0"}}}
	if err := claimrecord.Write(c.dir, r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claimrecord.Path(c.dir, "torn"), []byte(`{"version":2,"uid":`), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := c.Claims()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]claimrecord.Record{r}, recs); diff != "" {
		t.Errorf("Claims (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(claimrecord.Path(c.dir, "torn")); !os.IsNotExist(err) {
		t.Errorf("torn record still in place: %v", err)
	}
}
