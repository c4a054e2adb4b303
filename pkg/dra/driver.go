package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// DriverConfig is what the DRA front end needs; cmd/device-plugin fills it
// from flags.
type DriverConfig struct {
	NodeName string
	// KubeClient publishes ResourceSlices and reads ResourceClaims.
	KubeClient kubernetes.Interface
	// PluginDir is the driver's kubelet plugin directory: its socket, and
	// the claims' records under claims/ (kubeletplugin.KubeletPluginsDir/
	// DriverName by default).
	PluginDir string
	// RegistryDir is the kubelet's plugin registration directory
	// (kubeletplugin.KubeletRegistryDir by default).
	RegistryDir string
	// PodUID, when set, is this daemon's pod UID: the helper's sockets then
	// carry it and the old and the new pod of a DaemonSet update serve side
	// by side (kubeletplugin.RollingUpdate), so a node's claims are never
	// without a driver. Calls of both are serialized by the helper's file
	// lock, and Prepare keeps no state between calls but the claims' records
	// on disk, which both read. Empty: one instance per node.
	PodUID types.UID
	// CDIDir is where the claims' CDI specs go.
	CDIDir string
	// DevRoot is where this process sees the host's /dev.
	DevRoot string
	// MemlockHook is the host path of the memlock hook binary the claims'
	// CDI specs run (pkg/memlockhook); "" names none.
	MemlockHook string
	// FailClosed puts the netdev hook on the chained pool's claims'
	// devices (Preparer.FailClosed); nil puts none.
	FailClosed *FailClosed
	// HealthInterval is how often device health is re-sent to the kubelet
	// while nothing changes; 0 means 10 s (the kubelet marks a device's
	// health unknown after 30 s without one).
	HealthInterval time.Duration
	// ReconcileInterval is how often the claims' records are read to start
	// a watch of each new record's claim (and end those of records gone);
	// 0 means 30 s. A record whose claim goes from the API server (an
	// Unprepare that never came: the daemon was down when the kubelet sent
	// it) is unprepared, so its devices are free again (reconcile.go).
	ReconcileInterval time.Duration
	// PublishInterval is the least time between two publications of the
	// ResourceSlices; 0 means DefaultPublishInterval (pace.go).
	PublishInterval time.Duration
	// DeviceMetadata has the kubelet plugin helper write each prepared
	// claim's device metadata file (DeviceMetadata) and the CDI spec that
	// mounts it into the claim's containers
	// (kubeletplugin.EnableDeviceMetadata; metadata.resource.k8s.io/v1beta1).
	// Nothing in the kubelet needs a feature gate for it: the file reaches
	// the container as one more CDI device of the claim.
	DeviceMetadata bool
	Logger         *slog.Logger
}

// Driver is the DRA front end (agent.FrontEnd): the kubelet plugin
// (registration, claim preparation, device health) through the
// kubeletplugin helper, and the ResourceSlices of the agent's dra pools. The
// agent calls Update, which publishes, with every snapshot.
type Driver struct {
	cfg    DriverConfig
	log    *slog.Logger
	prep   *Preparer
	helper *kubeletplugin.Helper

	mu      sync.Mutex
	index   *Index
	gpus    []discovery.GPU // the node's, for the metadata's closest GPUs
	numa    int             // the node's NUMA node count
	health  []kubeletplugin.DeviceHealth
	changed chan struct{} // closed when health changes
	// want is the latest publication Publish asked for; the pacer hands it
	// to the helper (publish), kicked by Publish.
	want  *resourceslice.DriverResources
	pacer *Pacer
	// pubErr is the last publication's error, nil once one went through.
	pubErr error
	// noCapacity is the DRA pool whose published devices lost
	// allowMultipleAllocations (no DRAConsumableCapacity); refused is
	// closed when it is set (share.go).
	noCapacity string
	refused    chan struct{}

	stop sync.Once
}

// StartDriver registers the driver with the kubelet and serves its gRPC
// calls until Stop or the end of ctx. It publishes nothing until Publish.
func StartDriver(ctx context.Context, cfg DriverConfig) (*Driver, error) {
	if cfg.NodeName == "" || cfg.KubeClient == nil {
		return nil, errors.New("dra driver: node name and kube client are required")
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, DriverName)
	}
	if cfg.RegistryDir == "" {
		cfg.RegistryDir = kubeletplugin.KubeletRegistryDir
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/dev"
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = 10 * time.Second
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = 30 * time.Second
	}
	if cfg.PublishInterval <= 0 {
		cfg.PublishInterval = DefaultPublishInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// The claims' records are there before the first Prepare: the CNI
	// plugin tells "no claim for this pod" from "no DRA driver on this
	// node" by the directory.
	if err := os.MkdirAll(cfg.PluginDir, 0o750); err != nil {
		return nil, fmt.Errorf("dra driver: create plugin dir: %w", err)
	}
	claims := ClaimsDir(cfg.PluginDir)
	if err := os.MkdirAll(claims, 0o700); err != nil {
		return nil, fmt.Errorf("dra driver: create claims dir: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, index: &Index{}, changed: make(chan struct{}), refused: make(chan struct{})}
	d.prep = &Preparer{CDIDir: cfg.CDIDir, StateDir: claims, DevRoot: cfg.DevRoot, Devices: d, Log: cfg.Logger, MemlockHook: cfg.MemlockHook, FailClosed: cfg.FailClosed}
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(cfg.Logger.Handler()))
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(cfg.KubeClient),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir),
	}
	if cfg.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(cfg.PodUID))
	}
	if cfg.DeviceMetadata {
		// The latest metadata version only: no consumer of an older one
		// exists for this driver.
		opts = append(opts, kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}))
		if cfg.CDIDir != "" {
			opts = append(opts, kubeletplugin.CDIDirectory(cfg.CDIDir))
		}
	}
	h, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return nil, fmt.Errorf("start dra kubelet plugin: %w", err)
	}
	d.helper = h
	d.pacer = NewPacer(cfg.PublishInterval, d.publish)
	d.pacer.Result = d.published
	go d.pacer.Run(ctx)
	go d.reconcileLoop(ctx)
	return d, nil
}

// publish hands the latest publication to the helper, off the daemon's Run
// goroutine (the pacer's): the helper's first PublishResources starts its
// ResourceSlice controller and waits for its informer to sync, that is for
// the API server. Called from Publish, an API server that does not answer
// held the whole daemon (no device plugin pool socket, /healthz 503) until
// it answered. Later calls only update the running controller. The pacer
// calls it at most once per PublishInterval and tries a failed one again
// after a backoff (1 s doubling to 30 s) or at the next Publish.
func (d *Driver) publish(ctx context.Context) error {
	d.mu.Lock()
	res := d.want
	d.mu.Unlock()
	if res == nil {
		return nil
	}
	return d.helper.PublishResources(ctx, *res)
}

// published records a publication's outcome.
func (d *Driver) published(err error) {
	d.mu.Lock()
	was := d.pubErr
	d.pubErr = err
	d.mu.Unlock()
	switch {
	case err != nil:
		d.log.Error("publish resource slices; trying again", "err", err)
	case was != nil:
		d.log.Info("resource slices published again")
	}
}

// PublishErr is the last publication's error: nil once one went through
// (the helper's controller then keeps the slices in line by itself), and
// nil before the first.
func (d *Driver) PublishErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pubErr
}

// ClaimsDir is where a driver with this plugin directory keeps the claims'
// records (claimrecord.DefaultDir with the default plugin directory).
func ClaimsDir(pluginDir string) string { return filepath.Join(pluginDir, "claims") }

// Stop stops the kubelet plugin; a second call does nothing. The published
// slices stay: a restarted daemon republishes, and the scheduler keeps the
// devices meanwhile.
func (d *Driver) Stop() { d.stop.Do(d.helper.Stop) }

// Publish replaces the published pools: configured pool name -> members;
// opts are the pools' options (none: NCCL's variables, one claim per
// device). Devices whose
// names collide are left out and reported in the error; the rest is
// published. It does not wait for the API server: the claims' lookups and
// health are in place when it returns, the ResourceSlices follow when the
// API server answers (the pacer, pace.go; PublishErr says how the last went).
func (d *Driver) Publish(pools map[string][]discovery.RDMADevice, opts map[string]PoolOptions, healthy map[string]bool) error {
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	ix := &Index{}
	var health []kubeletplugin.DeviceHealth
	var errs []error
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		devs, e := Devices(pools[name], healthy)
		errs = append(errs, e...)
		InPool(devs, name)
		if n := opts[name].Shares; n > 0 {
			Share(devs, n)
		}
		pool := PoolName(d.cfg.NodeName, name)
		ix.Add(pool, devs)
		if opts[name].NoNCCL {
			ix.SetNoNCCL(pool)
		}
		ix.SetMemlock(pool, opts[name].Memlock)
		var sl []resourceslice.Slice
		for _, s := range Slices(devs) {
			sl = append(sl, resourceslice.Slice{Devices: s})
		}
		if len(sl) > 0 {
			res.Pools[pool] = resourceslice.Pool{Slices: sl}
		}
		health = append(health, Health(pool, devs, now)...)
	}
	d.mu.Lock()
	d.index = ix
	if !sameHealth(d.health, health) {
		close(d.changed)
		d.changed = make(chan struct{})
	}
	worse := newlyUnhealthy(d.health, health)
	d.health = health
	d.want = &res
	d.mu.Unlock()
	if worse {
		// Its taint must reach the scheduler now, not at the end of a
		// pacing window another change of the node opened (pace.go).
		d.pacer.Urgent()
	} else {
		d.pacer.Kick()
	}
	return errors.Join(errs...)
}

// newlyUnhealthy says whether a device published in was healthy and is
// unhealthy in now (a device that first shows up unhealthy was not
// allocatable before either).
func newlyUnhealthy(was, now []kubeletplugin.DeviceHealth) bool {
	healthy := map[[2]string]bool{}
	for _, h := range was {
		healthy[[2]string{h.PoolName, h.DeviceName}] = h.Health == kubeletplugin.HealthStatusHealthy
	}
	for _, h := range now {
		if h.Health != kubeletplugin.HealthStatusHealthy && healthy[[2]string{h.PoolName, h.DeviceName}] {
			return true
		}
	}
	return false
}

// Device implements Lookup over the last publication.
func (d *Driver) Device(pool, device string) (discovery.RDMADevice, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.index.Device(pool, device)
}

// NCCL implements Lookup over the last publication.
func (d *Driver) NCCL(pool string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.index.NCCL(pool)
}

// Memlock implements Lookup over the last publication.
func (d *Driver) Memlock(pool string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.index.Memlock(pool)
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	claim := Claim{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name}
	for _, r := range c.Status.ReservedFor {
		// The kubelet prepares a claim only for pods in reservedFor; the CNI
		// finds a pod's claims by these.
		if r.APIGroup == "" && r.Resource == "pods" {
			claim.PodUIDs = append(claim.PodUIDs, string(r.UID))
		}
	}
	if c.Status.Allocation != nil {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == DriverName {
				res := Result{Request: r.Request, Pool: r.Pool, Device: r.Device, AdminAccess: r.AdminAccess != nil && *r.AdminAccess}
				if r.ShareID != nil {
					res.ShareID = string(*r.ShareID)
				}
				claim.Results = append(claim.Results, res)
			}
		}
	}
	prepared, err := d.prep.Prepare(claim)
	if err != nil {
		d.log.Warn("prepare claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
	for _, p := range prepared {
		dev := kubeletplugin.Device{Requests: []string{p.Request}, PoolName: p.Pool, DeviceName: p.Device, CDIDeviceIDs: p.CDIDeviceIDs}
		if d.cfg.DeviceMetadata {
			dev.Metadata = d.metadata(p.Pool, p.Device)
		}
		res.Devices = append(res.Devices, dev)
	}
	d.log.Info("prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", len(prepared))
	return res
}

// metadata is a prepared device's metadata from the last publication (the
// Preparer found the device in it a moment ago).
func (d *Driver) metadata(pool, device string) *kubeletplugin.DeviceMetadata {
	d.mu.Lock()
	defer d.mu.Unlock()
	rdma, _ := d.index.Device(pool, device)
	return DeviceMetadata(rdma, d.index.Attributes(pool, device), d.gpus, d.numa)
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.prep.Unprepare(string(c.UID))
		if err != nil {
			d.log.Warn("unprepare claim", "claim", c.String(), "uid", c.UID, "err", err)
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin. Every background error
// of the helper (publishing slices) is retried by it; this logs, and
// learns of an API server without DRAConsumableCapacity (share.go).
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.noteDropped(err)
	d.log.Warn("dra kubelet plugin: "+msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// published device now, on every change, and every HealthInterval.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(d.cfg.HealthInterval)
	defer tick.Stop()
	for {
		d.mu.Lock()
		report := kubeletplugin.DeviceHealthReport{Devices: slices.Clone(d.health)}
		changed := d.changed
		d.mu.Unlock()
		now := time.Now()
		for i := range report.Devices {
			report.Devices[i].LastUpdated = now
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// Health is the kubelet health of a pool's published devices: healthy
// unless tainted, with the taint as the message.
func Health(pool string, devs []Device, now time.Time) []kubeletplugin.DeviceHealth {
	out := make([]kubeletplugin.DeviceHealth, 0, len(devs))
	for _, d := range devs {
		h := kubeletplugin.DeviceHealth{PoolName: pool, DeviceName: d.API.Name, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
		if len(d.API.Taints) > 0 {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = d.API.Taints[0].Key + "=" + d.API.Taints[0].Value
		}
		out = append(out, h)
	}
	return out
}

func sameHealth(a, b []kubeletplugin.DeviceHealth) bool {
	return slices.EqualFunc(a, b, func(x, y kubeletplugin.DeviceHealth) bool {
		return x.PoolName == y.PoolName && x.DeviceName == y.DeviceName && x.Health == y.Health && x.Message == y.Message
	})
}
