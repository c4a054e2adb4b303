package discovery

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEnumValue(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"4: ACTIVE\n", "ACTIVE", true},
		{"1: DOWN", "DOWN", true},
		{"5: LinkUp", "LinkUp", true},
		{"3: Disabled", "Disabled", true},
		{"ACTIVE", "", false},
		{"x: ACTIVE", "", false},
		{"4:", "", false},
		{"7: Phy Test", "Phy Test", true},
		{"4: 3b:00.0", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := ParseEnumValue(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseEnumValue(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseEnumValue(%q) error %v is not ErrMalformed", tt.in, err)
		}
	}
}

func TestParseIDs(t *testing.T) {
	tests := []struct {
		parse   func(string) (string, error)
		in, out string
		ok      bool
	}{
		{ParseHexID, "0x15b3\n", "15b3", true},
		{ParseHexID, "0x15B3", "15b3", true},
		{ParseHexID, "15b3", "", false},
		{ParseHexID, "0x15b", "", false},
		{ParseHexID, "0xzzzz", "", false},
		{ParseClass, "0x020700", "020700", true},
		{ParseClass, "0x0207", "", false},
		{ParseGUID, "b859:9f03:00d4:8a2e", "b859:9f03:00d4:8a2e", true},
		{ParseGUID, "B859:9F03:00D4:8A2E", "b859:9f03:00d4:8a2e", true},
		{ParseGUID, "b859:9f03:00d4", "", false},
		{ParseGUID, "b859:9f03:00d4:8a2g", "", false},
		{ParseGID, "fe80:0000:0000:0000:b859:9f03:00d4:8a2e", "fe80:0000:0000:0000:b859:9f03:00d4:8a2e", true},
		{ParseGID, "0000:0000:0000:0000:0000:0000:0000:0000", "", true},
		{ParseGID, "", "", true},
		{ParseGID, "fe80::1", "", false},
	}
	for _, tt := range tests {
		got, err := tt.parse(tt.in)
		if (err == nil) != tt.ok || got != tt.out {
			t.Errorf("parse(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.out, tt.ok)
		}
	}
}

func TestParseNUMANode(t *testing.T) {
	for in, want := range map[string]int{"-1\n": -1, "0": 0, "7": 7} {
		if got, err := ParseNUMANode(in); err != nil || got != want {
			t.Errorf("ParseNUMANode(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-2", "one", "99999"} {
		if _, err := ParseNUMANode(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseNUMANode(%q) error = %v, want ErrMalformed", in, err)
		}
	}
}

func TestIsPCIAddress(t *testing.T) {
	for in, want := range map[string]bool{
		"0000:3b:00.0": true, "0000:3B:1f.7": true, "0001:00:00.0": true,
		"0000:3b:00.8": false, "0000:3b:20.0": false, "0000:3b:00": false, "pci0000:3b": false,
		"mlx5_core.sf.2": false, "0000-3b:00.0": false, "000g:3b:00.0": false,
		"10000:e1:00.0": true, "c4f5:00:02.0": true, "000:3b:00.0": false, "123456789:3b:00.0": false,
		"0000:3b:00.0 ": false, "0000:3b:0.00": false,
	} {
		if got := IsPCIAddress(in); got != want {
			t.Errorf("IsPCIAddress(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestIsHostBridge(t *testing.T) {
	for in, want := range map[string]bool{
		"pci0000:00": true, "pci0101:00": true, "pci10000:e0": true, "pciC4F5:00": true,
		"pci0000:0": false, "0000:00": false, "pci:00": false, "pci0000:00:00.0": false, "pcix0000:00": false,
		"VMBUS:00": false, "platform": false,
	} {
		if got := IsHostBridge(in); got != want {
			t.Errorf("IsHostBridge(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestParseNVIDIAInformation(t *testing.T) {
	good := "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-5a3f0000-1c2d-4e5f-8a9b-c0ffee000000\nDevice Minor: \t 3\n"
	info, err := ParseNVIDIAInformation(good)
	if err != nil || info.UUID != "GPU-5a3f0000-1c2d-4e5f-8a9b-c0ffee000000" || info.Minor != 3 {
		t.Fatalf("ParseNVIDIAInformation = %+v, %v", info, err)
	}
	for _, bad := range []string{"", "GPU UUID: \t GPU-1\n", "Device Minor: 1\n", "GPU UUID: x\nDevice Minor: 1\n",
		"GPU UUID: GPU-1\nDevice Minor: -1\n"} {
		if _, err := ParseNVIDIAInformation(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseNVIDIAInformation(%q) error = %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzParsers feeds arbitrary bytes to every sysfs/procfs value parser: none
// may panic, and an accepted value must be in canonical form.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "0x15b3", "0x020700", "-1", "b859:9f03:00d4:8a2e",
		"fe80:0000:0000:0000:b859:9f03:00d4:8a2e", "0000:3b:00.0", "GPU UUID: GPU-1\nDevice Minor: 0\n", "", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseEnumValue(s); err == nil && (v == "" || strings.ContainsAny(v, "\t\n:") || strings.TrimSpace(v) != v) {
			t.Errorf("ParseEnumValue(%q) accepted %q", s, v)
		}
		if v, err := ParseHexID(s); err == nil && (len(v) != 4 || strings.ToLower(v) != v) {
			t.Errorf("ParseHexID(%q) accepted %q", s, v)
		}
		if v, err := ParseClass(s); err == nil && len(v) != 6 {
			t.Errorf("ParseClass(%q) accepted %q", s, v)
		}
		if v, err := ParseNUMANode(s); err == nil && v < -1 {
			t.Errorf("ParseNUMANode(%q) accepted %d", s, v)
		}
		if v, err := ParseGUID(s); err == nil && len(v) != 19 {
			t.Errorf("ParseGUID(%q) accepted %q", s, v)
		}
		if v, err := ParseGID(s); err == nil && v != "" && len(v) != 39 {
			t.Errorf("ParseGID(%q) accepted %q", s, v)
		}
		if info, err := ParseNVIDIAInformation(s); err == nil && (info.UUID == "" || info.Minor < 0) {
			t.Errorf("ParseNVIDIAInformation(%q) accepted %+v", s, info)
		}
		IsPCIAddress(s)
	})
}
