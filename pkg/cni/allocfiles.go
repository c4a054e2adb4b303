package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/pkg/allocator"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// allocTmpPattern names the temporary files of atomic writes in an
// allocation directory; the device plugin empties the directory, so a
// leftover after a crash does no harm.
const allocTmpPattern = ".kube-rdma-*.tmp"

// bindingFile is binding.json: the Alignment (nics, pairs), with the pool
// and the GPUs the pairs' "gpu" indexes refer to.
type bindingFile struct {
	Pool string `json:"pool"`
	allocator.Alignment
	GPUs []bindingGPU `json:"gpus"`
	// Netdevs are the pod-side netdev names of the NICs, in NICs' order.
	Netdevs []string `json:"netdevs"`
}

type bindingGPU struct {
	ID         string `json:"id"`
	PCIAddress string `json:"pciAddress"`
}

// allocFiles are the contents ADD writes into each allocation directory of
// the pod, by file name.
func (r *gpuRequest) allocFiles(rec *attachment.Attachment) (map[string][]byte, error) {
	var names, netdevs []string
	var devs []discovery.RDMADevice
	for _, d := range rec.Devices {
		names = append(names, d.RDMA)
		netdevs = append(netdevs, d.PodIfName)
		devs = append(devs, r.chosen[d.RDMA])
	}
	hca := strings.Join(names, ",")
	var nccl, env strings.Builder
	// A pool with nccl: false names its NICs in KUBE_RDMA_<POOL>_* only:
	// another pool is NCCL's fabric, and a container sourcing every env
	// file must not get two NCCL_IB_HCA (the daemon sets no NCCL_CONF_FILE
	// for it either; nccl.conf is left empty).
	if !r.pool.NoNCCL {
		// "=" makes NCCL match the names exactly (mlx5_1 does not also pick mlx5_10).
		fmt.Fprintf(&nccl, "NCCL_IB_HCA==%s\n", hca)
		fmt.Fprintf(&env, "export NCCL_IB_HCA=%s\n", shellQuote("="+hca))
		if idx, ok := discovery.CommonRoCEv2GIDIndex(devs); ok {
			fmt.Fprintf(&nccl, "NCCL_IB_GID_INDEX=%d\n", idx)
			fmt.Fprintf(&env, "export NCCL_IB_GID_INDEX=%d\n", idx)
			fmt.Fprintf(&env, "export UCX_IB_GID_INDEX=%d\n", idx)
		}
		// UCX reads no nccl.conf: the env file only, in the pod's NIC order.
		if ucx := discovery.UCXNetDevices(devs); ucx != "" {
			fmt.Fprintf(&env, "export UCX_NET_DEVICES=%s\n", shellQuote(ucx))
		}
	}
	stem := "KUBE_RDMA_" + allocdir.EnvName(r.pool.Pool)
	fmt.Fprintf(&env, "export %s_RDMA_DEVICES=%s\n", stem, shellQuote(hca))
	fmt.Fprintf(&env, "export %s_NETDEVS=%s\n", stem, shellQuote(strings.Join(netdevs, ",")))

	bf := bindingFile{Pool: r.pool.Pool, Alignment: r.alignment, GPUs: []bindingGPU{}, Netdevs: netdevs}
	for i, g := range r.gpus {
		bf.GPUs = append(bf.GPUs, bindingGPU{ID: r.gpuIDs[i], PCIAddress: g.PCIAddress})
	}
	// The order of the NICs is the pod's (its interfaces'), not the allocator's.
	bf.NICs = names
	b, err := json.MarshalIndent(bf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", allocdir.BindingFileName, err)
	}
	return map[string][]byte{
		allocdir.NCCLConfName:    []byte(nccl.String()),
		allocdir.EnvFileName:     []byte(env.String()),
		allocdir.BindingFileName: append(b, '\n'),
	}, nil
}

// writeAllocFiles writes nccl.conf, env and binding.json, each atomically,
// into the allocation directory of every container of the pod that holds
// slots (creating a directory Allocate has not made), pushing their
// removal: a failed ADD leaves no file naming NICs the pod does not have.
// The directories themselves are the daemon's to remove. Not fsynced: the
// containers of this sandbox read them, and after a machine crash every
// sandbox is created again, by an ADD that writes them again before any
// container starts; an fsync each cost ~2.5 ms (make bench-cni, record3).
func (r *gpuRequest) writeAllocFiles(root string, rec *attachment.Attachment, u *undo) error {
	files, err := r.allocFiles(rec)
	if err != nil {
		return err
	}
	for _, s := range r.slots {
		dir := allocdir.AllocPath(root, r.pool.Pool, allocdir.AllocID(s))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create allocation directory: %w", err)
		}
		for _, name := range []string{allocdir.NCCLConfName, allocdir.EnvFileName, allocdir.BindingFileName} {
			path := filepath.Join(dir, name)
			if err := atomicfile.Write(path, files[name], 0o644, allocTmpPattern); err != nil {
				return fmt.Errorf("fill allocation directory: %w", err)
			}
			u.push("remove "+path, func() error {
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				return nil
			})
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell's `.`/`source`.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
