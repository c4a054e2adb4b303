package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

// installMemlockHook puts the kube-rdma binary (bin, else the one beside
// this executable) into dir and returns its host path for the pools' CDI
// specs; "" when dir is "". A hook that cannot be installed stops the
// daemon: its pods would start with the runtime's locked-memory limit.
func installMemlockHook(dir, bin string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("memlock hook: find this executable: %w", err)
		}
		bin = filepath.Join(filepath.Dir(self), "kube-rdma")
	}
	path, err := memlockhook.Install(bin, dir)
	if err != nil {
		return "", fmt.Errorf("memlock hook (--memlock-hook-dir %s): %w", dir, err)
	}
	return path, nil
}
