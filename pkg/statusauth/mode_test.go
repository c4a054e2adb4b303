package statusauth

import "testing"

func TestModeRequired(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		addr string
		want bool
	}{
		{Auto, "127.0.0.1:9478", false},
		{Auto, "127.0.0.53:9478", false},
		{Auto, "[::1]:9478", false},
		{Auto, "localhost:9478", false},
		{Auto, ":9478", true},
		{Auto, "0.0.0.0:9478", true},
		{Auto, "[::]:9478", true},
		{Auto, "10.0.0.5:9478", true},
		{Auto, "node-1:9478", true},
		{Auto, "127.0.0.1", true}, // no port: not an address we can call loopback
		{On, "127.0.0.1:9478", true},
		{Off, "10.0.0.5:9478", false},
	} {
		if got := tc.mode.Required(tc.addr); got != tc.want {
			t.Errorf("%s.Required(%q) = %v, want %v", tc.mode, tc.addr, got, tc.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"auto", "on", "off"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "true", "ON", "yes"} {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) accepted", s)
		}
	}
}
