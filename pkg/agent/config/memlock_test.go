package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMemlock(t *testing.T) {
	good := []struct {
		in   string
		want uint64
	}{
		{"unlimited", MemlockUnlimited},
		{" Unlimited ", MemlockUnlimited},
		{"infinity", MemlockUnlimited},
		{"64Gi", 64 << 30},
		{"8Mi", 8 << 20},
		{"8M", 8_000_000},
		{"1073741824", 1 << 30},
		{"0.5", 1}, // a fraction of a byte rounds up
		{"1e3", 1000},
		{"2E", 2_000_000_000_000_000_000},
		{"1Ei", 1 << 60},
	}
	for _, tc := range good {
		got, err := ParseMemlock(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMemlock(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"lots", `"lots" is not "unlimited" or a quantity such as 64Gi`},
		{"-1Gi", `"-1Gi" must be positive`},
		{"0", `"0" must be positive`},
		{"64GB", `"64GB" is not "unlimited"`},
		{"100Ei", `"100Ei" is too large`},
		{"9227000000000000000", `is too large`},          // wrapped past int64 (FuzzParseMemlock)
		{"922E372036854775807", "exponent out of range"}, // ran for ever (FuzzParseMemlock)
		{"1e-400", "exponent out of range"},
	}
	for _, tc := range bad {
		_, err := ParseMemlock(tc.in)
		if !errors.Is(err, ErrBadMemlock) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseMemlock(%q) = %v; want ErrBadMemlock saying %q", tc.in, err, tc.msg)
		}
	}
}

func TestFormatMemlock(t *testing.T) {
	for _, v := range []uint64{MemlockUnlimited, 64 << 30, 8 << 20, 3 << 10, 1000, 1} {
		s := FormatMemlock(v)
		back, err := ParseMemlock(s)
		if err != nil || back != v {
			t.Errorf("FormatMemlock(%d) = %q, parses back as %d, %v", v, s, back, err)
		}
	}
	if got := FormatMemlock(64 << 30); got != "64Gi" {
		t.Errorf("FormatMemlock(64Gi) = %q", got)
	}
}

func TestPoolMemlock(t *testing.T) {
	head := "resourcePrefix: rdma.example.com\npools:\n- name: a\n  mode: exclusive\n  selectors: {vendors: [15b3]}\n"
	c, err := Parse([]byte(head + "  memlock: 64Gi\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pools[0].MemlockLimit(); got != 64<<30 {
		t.Errorf("memlock 64Gi: limit %d", got)
	}
	c, err = Parse([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pools[0].MemlockLimit(); got != MemlockUnlimited {
		t.Errorf("no memlock: limit %d, want unlimited", got)
	}
	_, err = Parse([]byte(head + "  memlock: 64GB\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "pools[0].memlock" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("memlock 64GB: %v; want a FieldError on pools[0].memlock", err)
	}
	want := `pools[0].memlock: bad memlock limit: "64GB" is not "unlimited" or a quantity such as 64Gi`
	if err.Error() != want {
		t.Errorf("memlock 64GB:\n got %s\nwant %s", err, want)
	}
}
