package statusauth

import (
	"fmt"
	"net"
)

// Mode says when the status endpoints require authentication.
type Mode string

const (
	// Auto requires it unless the listener's address is the loopback.
	Auto Mode = "auto"
	// On always requires it.
	On Mode = "on"
	// Off never does: whoever reaches the address reads /metrics and /state.
	Off Mode = "off"
)

// ParseMode parses auto, on or off.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Auto, On, Off:
		return m, nil
	}
	return "", fmt.Errorf("%q is not auto, on or off", s)
}

// Required reports whether a status listener on addr (host:port) needs the
// filter under m.
func (m Mode) Required(addr string) bool {
	switch m {
	case On:
		return true
	case Off:
		return false
	}
	return !Loopback(addr)
}

// Loopback reports whether addr (host:port) binds the loopback only: a
// loopback IP or "localhost". An empty host (every interface), another name
// or an address that does not parse is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
