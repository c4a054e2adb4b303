package discovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMalformed marks a sysfs or procfs value that does not have the format
// the kernel writes.
var ErrMalformed = errors.New("malformed value")

func malformed(what, v string) error {
	return fmt.Errorf("%w: %s %q", ErrMalformed, what, truncate(v))
}

func truncate(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// ParseEnumValue parses a port attribute of the form "4: ACTIVE" (state) or
// "5: LinkUp" (phys_state) and returns the name ("ACTIVE").
func ParseEnumValue(v string) (string, error) {
	v = strings.TrimSpace(v)
	num, name, ok := strings.Cut(v, ":")
	if !ok {
		return "", malformed("port state", v)
	}
	if _, err := strconv.ParseUint(strings.TrimSpace(num), 10, 8); err != nil {
		return "", malformed("port state", v)
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return "", malformed("port state", v)
	}
	// Names are words such as ACTIVE, LinkUp, ACTIVE_DEFER; phys_state 7 is
	// "Phy Test", with a space.
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ' ') {
			return "", malformed("port state", v)
		}
	}
	return name, nil
}

// ParseHexID parses a PCI "vendor"/"device" file ("0x15b3") into lower-case
// hex without the prefix ("15b3").
func ParseHexID(v string) (string, error) {
	return parseHex(v, 4, "pci id")
}

// ParseClass parses a PCI "class" file ("0x020700") into "020700".
func ParseClass(v string) (string, error) {
	return parseHex(v, 6, "pci class")
}

func parseHex(v string, width int, what string) (string, error) {
	v = strings.TrimSpace(v)
	h, ok := strings.CutPrefix(strings.ToLower(v), "0x")
	if !ok || len(h) != width {
		return "", malformed(what, v)
	}
	if _, err := strconv.ParseUint(h, 16, 32); err != nil {
		return "", malformed(what, v)
	}
	return h, nil
}

// ParseNUMANode parses a "numa_node" file; -1 means unknown.
func ParseNUMANode(v string) (int, error) {
	v = strings.TrimSpace(v)
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 || n > 4095 {
		return 0, malformed("numa node", v)
	}
	return n, nil
}

// ParseGUID checks a "node_guid" value ("b859:9f03:00d4:8a2e").
func ParseGUID(v string) (string, error) {
	v = strings.TrimSpace(v)
	parts := strings.Split(v, ":")
	if len(parts) != 4 {
		return "", malformed("guid", v)
	}
	for _, p := range parts {
		if len(p) != 4 {
			return "", malformed("guid", v)
		}
		if _, err := strconv.ParseUint(p, 16, 16); err != nil {
			return "", malformed("guid", v)
		}
	}
	return strings.ToLower(v), nil
}

// ParseGID checks a GID table entry ("fe80:0000:...:0001", eight groups).
// It returns "" for the all-zero GID that older kernels show for empty slots,
// and for an empty value: the kernel fails the read of an empty slot, which
// a plain copy (cp -r) of the table leaves behind as an empty file.
func ParseGID(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	parts := strings.Split(v, ":")
	if len(parts) != 8 {
		return "", malformed("gid", v)
	}
	zero := true
	for _, p := range parts {
		if len(p) != 4 {
			return "", malformed("gid", v)
		}
		n, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return "", malformed("gid", v)
		}
		if n != 0 {
			zero = false
		}
	}
	if zero {
		return "", nil
	}
	return strings.ToLower(v), nil
}

// IsPCIAddress reports whether s is a PCI function address "DDDD:BB:DD.F".
// The kernel prints the domain with at least four hex digits: Intel VMD
// domains (10000 and up) have five.
func IsPCIAddress(s string) bool {
	n := len(s) - len(":BB:DD.F")
	if n < 4 || n > 8 {
		return false
	}
	dom, rest := s[:n], s[n:]
	if rest[0] != ':' || rest[3] != ':' || rest[6] != '.' || !isHex(dom) || !isHex(rest[1:3]) || !isHex(rest[4:6]) {
		return false
	}
	// device is 5 bits (0-1f), function 3 bits (0-7).
	dev, _ := strconv.ParseUint(rest[4:6], 16, 8)
	return dev <= 0x1f && rest[7] >= '0' && rest[7] <= '7'
}

// IsHostBridge reports whether a sysfs path component names a PCI host
// bridge, "pciDDDD:BB" (the domain as in IsPCIAddress).
func IsHostBridge(s string) bool {
	dom, bus, ok := strings.Cut(strings.TrimPrefix(s, "pci"), ":")
	return ok && strings.HasPrefix(s, "pci") && len(dom) >= 4 && len(dom) <= 8 && len(bus) == 2 && isHex(dom) && isHex(bus)
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// NVIDIAInfo is what /proc/driver/nvidia/gpus/<bdf>/information says.
type NVIDIAInfo struct {
	UUID  string
	Minor int
}

// ParseNVIDIAInformation parses the NVIDIA driver's per-GPU information file,
// lines of "Key: \t value". It needs "GPU UUID" and "Device Minor".
func ParseNVIDIAInformation(text string) (NVIDIAInfo, error) {
	info := NVIDIAInfo{Minor: -1}
	for line := range strings.Lines(text) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "GPU UUID":
			if !strings.HasPrefix(val, "GPU-") && !strings.HasPrefix(val, "MIG-") {
				return NVIDIAInfo{}, malformed("gpu uuid", val)
			}
			info.UUID = val
		case "Device Minor":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 255 {
				return NVIDIAInfo{}, malformed("device minor", val)
			}
			info.Minor = n
		}
	}
	if info.UUID == "" || info.Minor < 0 {
		return NVIDIAInfo{}, malformed("nvidia information", text)
	}
	return info, nil
}
