package discovery

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNetdevPKey(t *testing.T) {
	root := t.TempDir()
	for name, pkey := range map[string]string{"ib0": "0xffff\n", "ib0.8001": "0x8001\n", "bad0": "partition\n"} {
		dir := filepath.Join(root, "class/net", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pkey"), []byte(pkey), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "class/net/eth0"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := Scanner{SysRoot: root}
	for _, tc := range []struct {
		name    string
		want    uint16
		wantErr bool
	}{
		{"ib0", 0xffff, false},
		{"ib0.8001", 0x8001, false},
		{"eth0", 0, false},
		{"gone0", 0, false},
		{"bad0", 0, true},
		{"../x", 0, true},
	} {
		got, err := s.NetdevPKey(tc.name)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("NetdevPKey(%q) = %#x, %v; want %#x, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}
