package cni

import (
	"errors"
	"io/fs"
	"log/slog"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/devicecheckpoint"
)

// holdsNone reports whether the kubelet's device checkpoint
// (Plugin.KubeletCheckpoint) shows that the pod holds no device of conf's
// resource, so that resourceName mode passes the pod through without
// asking the kubelet: a chained entry then costs pods without RDMA no
// kubelet call.
//
// The kubelet writes the checkpoint during the pod's admission, before
// its sandbox exists, so a pod the kubelet gave devices of the resource to
// is in it by the time of its ADD. Only a checkpoint that reads as the
// kubelet writes it and lists the resource as registered counts (it is
// the kubelet that serves this pool); without the pod's UID, with no
// checkpoint or one in another format, or with the pod in it, the answer
// is false and ADD asks the kubelet as before.
func (p *Plugin) holdsNone(conf *netconf.Conf, pod podRef, log *slog.Logger) bool {
	if pod.UID == "" {
		return false
	}
	c, ok := p.kubeletCheckpoint(conf, log)
	if !ok || c.Holds(pod.UID, conf.ResourceName) {
		return false
	}
	log.Debug("the kubelet's device checkpoint gives the pod no device of the pool; not asking the kubelet",
		"pod", pod.Namespace+"/"+pod.Name, "resource", conf.ResourceName)
	return true
}

// kubeletCheckpoint reads the kubelet's device checkpoint when it can
// decide for conf's resource: it is there, in the kubelet's layout, and
// lists the resource as registered. Otherwise ok is false.
func (p *Plugin) kubeletCheckpoint(conf *netconf.Conf, log *slog.Logger) (c devicecheckpoint.Checkpoint, ok bool) {
	if p.KubeletCheckpoint == "" || conf.ResourceName == "" {
		return c, false
	}
	c, err := devicecheckpoint.Read(p.KubeletCheckpoint)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Debug("kubelet device checkpoint not used; asking the kubelet", "err", err)
		}
		return c, false
	}
	return c, c.Registered(conf.ResourceName)
}

// checkpointServes reports whether pods without a device of conf's resource
// pass through on the kubelet's device checkpoint, without the kubelet.
func (p *Plugin) checkpointServes(conf *netconf.Conf, log *slog.Logger) bool {
	_, ok := p.kubeletCheckpoint(conf, log)
	return ok
}
