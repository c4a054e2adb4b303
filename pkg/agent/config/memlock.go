package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MemlockUnlimited is RLIMIT_MEMLOCK's RLIM_INFINITY, the default limit of a
// pool's containers when the NRI plugin is on (docs/device-plugin.md, "Locked
// memory").
const MemlockUnlimited uint64 = math.MaxUint64

// maxExponent bounds a limit's decimal exponent: 10^19 already exceeds
// 64 bits.
const maxExponent = 30

// ErrBadMemlock is wrapped by every ParseMemlock error.
var ErrBadMemlock = errors.New("bad memlock limit")

// ParseMemlock reads a locked-memory limit: "unlimited" (also "infinity",
// any case) or a positive Kubernetes quantity of bytes ("64Gi", "8M",
// "1073741824"). A fraction of a byte rounds up.
func ParseMemlock(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "unlimited", "infinity":
		return MemlockUnlimited, nil
	case "":
		return 0, fmt.Errorf("%w: empty (want \"unlimited\" or a quantity such as 64Gi)", ErrBadMemlock)
	}
	// A decimal exponent far past what fits in 64 bits makes the quantity's
	// arithmetic run for ever ("922E372036854775807", found by
	// FuzzParseMemlock): refuse it first. "E" and "Ei" alone are suffixes.
	if i := strings.IndexAny(t, "eE"); i >= 0 && t[i+1:] != "" && t[i+1:] != "i" {
		if exp, err := strconv.Atoi(t[i+1:]); err != nil || exp > maxExponent || exp < -maxExponent {
			return 0, fmt.Errorf("%w: %q: exponent out of range (at most %d)", ErrBadMemlock, s, maxExponent)
		}
	}
	q, err := resource.ParseQuantity(t)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not \"unlimited\" or a quantity such as 64Gi", ErrBadMemlock, s)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("%w: %q must be positive", ErrBadMemlock, s)
	}
	v, ok := q.AsInt64()
	if !ok {
		v = q.Value() // a fraction of a byte rounds up
	}
	if v == math.MaxInt64 || v <= 0 {
		// ParseQuantity saturates what does not fit in an int64, or
		// (9227000000000000000, found by FuzzParseMemlock) Value wraps.
		return 0, fmt.Errorf("%w: %q is too large (use \"unlimited\")", ErrBadMemlock, s)
	}
	return uint64(v), nil
}

// MemlockLimit is the pool's locked-memory limit: its memlock field, or
// MemlockUnlimited when the field is empty or (never after Validate) bad.
func (p Pool) MemlockLimit() uint64 {
	if p.Memlock == "" {
		return MemlockUnlimited
	}
	v, err := ParseMemlock(p.Memlock)
	if err != nil {
		return MemlockUnlimited
	}
	return v
}

// FormatMemlock writes a limit the way ParseMemlock reads it back:
// "unlimited", or bytes in the largest binary unit that divides them.
func FormatMemlock(v uint64) string {
	if v == MemlockUnlimited {
		return "unlimited"
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if v >= 1<<u.shift && v%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", v>>u.shift, u.suffix)
		}
	}
	return fmt.Sprintf("%d", v)
}
