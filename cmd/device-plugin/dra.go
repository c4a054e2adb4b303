package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// draFlags are the `run` flags of the DRA front end (pkg/dra, docs/dra.md).
type draFlags struct {
	enabled     bool
	pluginDir   string
	registryDir string
	podUID      string
	claimStatus bool
	metadata    bool
}

func (f *draFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "dra", false, "serve the pools with frontend dra as the DRA driver "+dra.DriverName+" (ResourceSlices, claim preparation; docs/dra.md); needs the API server (in-cluster config or --kubeconfig), the node name and --cdi-dir")
	fs.StringVar(&f.pluginDir, "dra-plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, dra.DriverName), "the DRA driver's kubelet plugin directory (its socket, and the prepared claims' records under claims/), for --dra")
	fs.StringVar(&f.registryDir, "dra-registry-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory, for --dra")
	fs.BoolVar(&f.claimStatus, "dra-claim-status", true, "with --dra, when --cni-chained-pool is a pool of frontend dra: write each claim's status.devices entry of the netdevs the CNI plugin attached (interface, IPs, MAC, condition Ready; docs/dra.md, \"Claim status\"); needs patch on resourceclaims/status")
	fs.BoolVar(&f.metadata, "dra-device-metadata", true, "with --dra, write each prepared claim's device metadata file (the NIC's attributes, port, verbs node and closest GPUs; KEP-5304 format metadata.resource.k8s.io/v1beta1) and mount it into the claim's containers under /var/run/kubernetes.io/dra-device-attributes through CDI (docs/dra.md, \"Device metadata\")")
	fs.StringVar(&f.podUID, "pod-uid", os.Getenv("POD_UID"), "this pod's UID (default $POD_UID; the chart sets it from metadata.uid): with --dra, the old and the new pod of a DaemonSet update serve the kubelet side by side (kubeletplugin.RollingUpdate, kubelet 1.33 or later); empty: one driver instance per node")
}

// startDRA starts the DRA front end, for the agent to drive. Without --dra
// it does nothing and returns nil.
func startDRA(ctx context.Context, cfg runConfig, a apiConn) (*dra.Driver, error) {
	if !cfg.dra.enabled {
		return nil, nil
	}
	if !cfg.nodeNameSet {
		return nil, errors.New("run: --dra needs the node's name: --node-name or NODE_NAME (the chart sets it from spec.nodeName)")
	}
	if cfg.plugin.CDIDir == "" {
		return nil, errors.New("run: --dra needs --cdi-dir: prepared claims reach containers as CDI devices")
	}
	if a.err != nil {
		return nil, fmt.Errorf("run: --dra: %w", a.err)
	}
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: cfg.NodeName, KubeClient: a.clients.kube, PluginDir: cfg.dra.pluginDir,
		RegistryDir: cfg.dra.registryDir, PodUID: types.UID(cfg.dra.podUID), CDIDir: cfg.plugin.CDIDir, DevRoot: cfg.plugin.DevRoot, MemlockHook: cfg.plugin.MemlockHook, FailClosed: draFailClosed(cfg),
		DeviceMetadata: cfg.dra.metadata, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return d, nil
}
