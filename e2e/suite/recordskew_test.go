package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fields no release writes: what a newer release's record carries that the installed plugin
// does not know.
const (
	newerTopField    = "e2eNewerRelease"
	newerDeviceField = "e2eNewerDevice"
)

// testFaultNewerRecord: a running chained pod's attachment record gets fields the installed
// plugin does not know, at the top and in its device (what a newer release's record carries
// after a rollback), then the pod is deleted while its IPAM cannot release (host-local's
// network directory replaced by a file). The installed plugin's DEL returns the NIC, saves
// the record for the next DEL and fails on IPAM: that save must keep both unknown fields as
// written (a reader of one release never drops what a later one wrote). With IPAM back, a
// retried DEL ends the attachment: the pod is gone within maxTerminating of its deletion and
// the invariant check holds.
func testFaultNewerRecord(t *testing.T, e *env) {
	c := e.needFaults(t)
	name := "newer-record"
	f, rec, _ := e.chainedNICPod(t, "a newer release's record rewritten by the installed plugin", name)
	file, _, err := c.recordOf(t.Context(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.cniState, file)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	devs, _ := m["devices"].([]any)
	dev0, _ := devs[0].(map[string]any)
	if len(devs) != 1 || dev0 == nil {
		t.Fatalf("record %s: devices %v, want one", file, m["devices"])
	}
	top := map[string]any{"rolledBackFrom": "v9.9.9", "list": []any{1.0, "two"}}
	m[newerTopField] = top
	dev0[newerDeviceField] = 7.0
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// Replaced as the plugin replaces it (a dot-file, not a record, renamed over it).
	tmp := filepath.Join(c.cniState, ".e2e-newer-record.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}

	lease, _, err := c.leaseOf(rec.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	netDir := filepath.Dir(lease)
	aside := netDir + ".e2e-aside"
	if err := os.Rename(netDir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(netDir, []byte("not a directory: IPAM cannot release\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := os.Remove(netDir); err != nil {
			t.Errorf("restore IPAM: %v", err)
		}
		if err := os.Rename(aside, netDir); err != nil {
			t.Errorf("restore IPAM: %v", err)
		}
	}
	defer restore()

	deleted := time.Now()
	if err := e.core.Pods(f.ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The DEL's save: the device returned, as written by the installed plugin.
	var saved map[string]any
	err = eventually(t.Context(), time.Minute, func(context.Context) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		saved = nil
		if err := json.Unmarshal(b, &saved); err != nil {
			return fmt.Errorf("record %s: %w", file, err)
		}
		ds, _ := saved["devices"].([]any)
		if len(ds) != 1 {
			return fmt.Errorf("record %s: devices %v", file, saved["devices"])
		}
		if d, _ := ds[0].(map[string]any); d == nil || d["returned"] != true {
			return fmt.Errorf("record %s: not rewritten by a DEL yet (device not marked returned)", file)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gotTop, _ := json.Marshal(saved[newerTopField])
	wantTop, _ := json.Marshal(top)
	if string(gotTop) != string(wantTop) {
		t.Errorf("the DEL's save of %s: %s = %s, want %s as written", file, newerTopField, gotTop, wantTop)
	}
	if d := saved["devices"].([]any)[0].(map[string]any); d[newerDeviceField] != 7.0 {
		t.Errorf("the DEL's save of %s: device %s = %v, want 7 as written", file, newerDeviceField, d[newerDeviceField])
	}
	rewritten := time.Since(deleted)

	restore()
	err = eventually(t.Context(), maxTerminating, func(ctx context.Context) error {
		_, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
	terminating := time.Since(deleted)
	if err != nil {
		t.Errorf("pod whose DEL failed on IPAM: %v after %.1f s (at most %v)", err, terminating.Seconds(), maxTerminating)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record %s after the pod is gone: %v, want it removed", file, err)
	}
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("a record with a newer release's fields (top level and device) rewritten by the installed plugin's DEL, whose IPAM failed: both kept, saved %.1f s after the delete; pod gone %.1f s after it, IPAM back",
		rewritten.Seconds(), terminating.Seconds()), out)
}
