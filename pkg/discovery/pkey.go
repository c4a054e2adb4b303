package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NetdevPKey reads the partition key of an IPoIB netdev,
// <sysfs>/class/net/<name>/pkey ("0x8001"): the CNI plugin gives a shared
// InfiniBand NIC's pod an IPoIB child in its parent's partition. A netdev
// without the attribute (not IPoIB) is 0 without an error.
func (s Scanner) NetdevPKey(name string) (uint16, error) {
	if s.SysRoot == "" {
		return 0, fmt.Errorf("sysfs root is not set")
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return 0, fmt.Errorf("%q is not a netdev name", name)
	}
	path := filepath.Join(s.SysRoot, "class/net", name, "pkey")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read pkey of %s: %w", name, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 16)
	if err != nil {
		return 0, &fs.PathError{Op: "parse", Path: path, Err: malformed("pkey", strings.TrimSpace(string(b)))}
	}
	return uint16(v), nil
}
