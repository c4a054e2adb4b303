package deviceplugin

import (
	"maps"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/devinfo"
)

// Device-info files (pkg/hostapi/devinfo, the NPWG Device Info Spec): at Allocate,
// for each kubelet device ID that stands for one PCI function (a device of an
// exclusive pool, a slot of a shared pool of one NIC), the file Multus copies
// for the CNI plugin and puts in the pod's network-status. A slot of several
// NICs and a gpuAligned slot name no one function: no file.
//
// A file is removed when its device leaves the pool (setMembers) and when
// the pool server closes (the pool's removal or change, the daemon's stop, so
// helm uninstall leaves none), unless another process serves the pool now
// (superseded: the file is that process's). Multus reads the file at the
// pod's sandbox creation, seconds after Allocate; it copies it, so a file
// removed later takes nothing from a running pod.

// deviceInfo is the file of one kubelet device ID, false when it names no
// single PCI function.
func deviceInfo(devs []discovery.RDMADevice) (devinfo.Info, bool) {
	if len(devs) != 1 || devs[0].PCIAddress == "" || devs[0].Kind == discovery.KindSF {
		return devinfo.Info{}, false
	}
	d := devs[0]
	return devinfo.NewPCI(devinfo.PCI{PCIAddress: d.PCIAddress, RDMADevice: d.Name, PFPCIAddress: d.PhysFn}), true
}

// writeDeviceInfo writes the files of a container's device IDs. A failure is
// logged, not returned: the pod gets its devices either way, and Multus runs
// without a file (its network-status then has no device-info).
func (s *poolServer) writeDeviceInfo(snap snapshot, ids []string) {
	if s.alloc.devInfoDir == "" || s.pool.GPUAligned() || s.isSuperseded() {
		return
	}
	s.devInfoMu.Lock()
	defer s.devInfoMu.Unlock()
	for _, id := range ids {
		info, ok := deviceInfo(snap.byID[id])
		if !ok {
			continue
		}
		if s.devInfo == nil {
			s.devInfo = map[string]bool{}
		}
		s.devInfo[id] = true // before the write: a half-done write is removed too
		if err := devinfo.Save(s.alloc.devInfoDir, s.resource, id, info); err != nil {
			s.log.Warn("write device-info", "device", id, "err", err)
		}
	}
}

// removeDeviceInfo removes the files of the device IDs not in keep (every
// file written and every current device's, when keep is nil: the current
// devices' files may be a previous process's).
func (s *poolServer) removeDeviceInfo(keep map[string][]discovery.RDMADevice) {
	if s.alloc.devInfoDir == "" || s.isSuperseded() {
		return
	}
	s.devInfoMu.Lock()
	defer s.devInfoMu.Unlock()
	ids := slices.Collect(maps.Keys(s.devInfo))
	if keep == nil {
		snap, _ := s.current()
		for id, devs := range snap.byID {
			if _, ok := deviceInfo(devs); ok && !s.devInfo[id] {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if _, ok := keep[id]; ok {
			continue
		}
		if err := devinfo.Remove(s.alloc.devInfoDir, s.resource, id); err != nil {
			s.log.Warn("remove device-info", "device", id, "err", err)
			continue
		}
		delete(s.devInfo, id)
	}
}
