package deviceplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// applyConfig starts, keeps or restarts pool servers for a new config. A
// pool whose definition and resource name are unchanged keeps running.
func (d *Daemon) applyConfig(ctx context.Context, c config.Config) {
	want := map[string]config.Pool{}
	for _, p := range c.Pools {
		want[p.Name] = p
	}
	for name, p := range d.pools {
		np, ok := want[name]
		if ok && reflect.DeepEqual(np, p.pool) && c.ResourceName(np) == p.resource {
			continue
		}
		d.log.Info("stopping pool", "pool", name)
		p.stop()
		delete(d.pools, name)
		d.m.forgetPool(name)
		if d.cdi != nil {
			if err := d.cdi.remove(name); err != nil {
				d.log.Warn("remove cdi spec", "pool", name, "err", err)
			}
		}
	}
	d.conf = c
	var started []*poolServer
	for _, pool := range c.Pools {
		if _, ok := d.pools[pool.Name]; ok {
			continue
		}
		p := newPoolServer(pool, c.ResourceName(pool), d.cfg.KubeletDir, d.numa,
			allocContext{devRoot: d.cfg.DevRoot, cdi: d.cdi != nil}, d.log, d.m)
		d.pools[pool.Name] = p
		started = append(started, p)
	}
	d.push(true)
	for _, p := range started {
		if err := p.serve(); err != nil {
			d.log.Error("serve pool", "pool", p.pool.Name, "err", err)
			continue
		}
		d.register(ctx, p)
	}
}

// reload re-reads the config file; a bad file keeps the running config.
func (d *Daemon) reload(ctx context.Context) {
	data, err := os.ReadFile(d.cfg.ConfigFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return // mid-update (ConfigMap symlink swap); the create event follows
		}
		d.rejectConfig(err)
		return
	}
	if bytes.Equal(data, d.confData) {
		return
	}
	c, err := config.Parse(data)
	if err != nil {
		d.confData = data // do not log the same bad file on every event
		d.rejectConfig(err)
		return
	}
	d.confData = data
	d.m.reload(true)
	d.stateMu.Lock()
	d.state.ConfigError = ""
	d.stateMu.Unlock()
	d.log.Info("config reloaded", "file", d.cfg.ConfigFile, "pools", len(c.Pools))
	d.applyConfig(ctx, c)
}

func (d *Daemon) rejectConfig(err error) {
	d.m.reload(false)
	d.log.Error("config reload rejected; the last good config keeps running", "file", d.cfg.ConfigFile, "err", err)
	d.stateMu.Lock()
	d.state.ConfigError = err.Error()
	d.stateMu.Unlock()
	d.publishState()
}

// handleEvent reacts to the kubelet's socket coming back, one of our sockets
// being removed (a kubelet restart clears the directory), config updates and
// RDMA class changes.
func (d *Daemon) handleEvent(ctx context.Context, ev fsnotify.Event) {
	dir, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	if dir == filepath.Clean(d.cfg.KubeletDir) {
		if base == KubeletSocket && ev.Has(fsnotify.Create) {
			d.log.Info("kubelet socket created; registering every pool")
			for _, name := range sortedKeys(d.pools) {
				p := d.pools[name]
				if !p.serving() {
					if err := p.serve(); err != nil {
						d.log.Error("serve pool", "pool", name, "err", err)
						continue
					}
				}
				d.retry[name] = 0
				d.register(ctx, p)
			}
			return
		}
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			for _, name := range sortedKeys(d.pools) {
				p := d.pools[name]
				if base != SocketName(name) || p.serving() {
					continue
				}
				d.log.Info("plugin socket removed; serving again", "pool", name)
				if err := p.serve(); err != nil {
					d.log.Error("serve pool", "pool", name, "err", err)
					continue
				}
				d.register(ctx, p)
			}
		}
		return
	}
	if d.cfg.ConfigFile != "" && dir == filepath.Dir(d.cfg.ConfigFile) {
		if base == filepath.Base(d.cfg.ConfigFile) || base == "..data" {
			d.reload(ctx)
		}
		return
	}
	d.refresh()
}

// register registers in the background when the kubelet socket exists;
// otherwise the socket's creation triggers it.
// A pool registers once per kubelet socket and plugin socket: a kubelet
// restart shows up both as our socket's removal and as kubelet.sock's
// creation, and the second event must not register again.
func (d *Daemon) register(ctx context.Context, p *poolServer) {
	fi, err := os.Stat(filepath.Join(d.cfg.KubeletDir, KubeletSocket))
	if err != nil {
		d.log.Info("kubelet socket not there yet; waiting for it", "pool", p.pool.Name)
		return
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	key := fmt.Sprintf("%d/%d/%d", ino, fi.ModTime().UnixNano(), p.generation())
	if d.regKey[p.pool.Name] == key {
		return
	}
	d.regKey[p.pool.Name] = key
	go func() {
		r := regResult{p: p, err: p.register(ctx)}
		select {
		case d.regDone <- r:
		case <-ctx.Done():
		}
	}()
}

func (d *Daemon) registered(r regResult) {
	name := r.p.pool.Name
	if d.pools[name] != r.p {
		return // the pool was replaced meanwhile
	}
	d.m.registration(name, r.err == nil)
	if r.err == nil {
		d.retry[name] = 0
		d.log.Info("registered with kubelet", "pool", name, "resource", r.p.resource)
		return
	}
	delete(d.regKey, name)
	wait := max(retryFirst, min(2*d.retry[name], retryMax))
	d.retry[name] = wait
	d.log.Warn("register with kubelet failed; retrying", "pool", name, "in", wait, "err", r.err)
	time.AfterFunc(wait, func() {
		select {
		case d.retryC <- name:
		default:
		}
	})
}

// State is the daemon's view of the node, served as JSON on /state.
type State struct {
	NodeName      string         `json:"nodeName"`
	RDMANetnsMode rdma.NetnsMode `json:"rdmaNetnsMode"`
	ConfigFile    string         `json:"configFile,omitempty"`
	ConfigError   string         `json:"configError,omitempty"`
	Problems      []string       `json:"problems,omitempty"`
	Pools         []PoolState    `json:"pools"`
}

// PoolState is one pool's advertised devices.
type PoolState struct {
	Name     string        `json:"name"`
	Resource string        `json:"resource"`
	Mode     config.Mode   `json:"mode"`
	Devices  []DeviceState `json:"devices"`
}

// DeviceState is one kubelet device.
type DeviceState struct {
	ID          string   `json:"id"`
	Health      string   `json:"health"`
	RDMADevices []string `json:"rdmaDevices"`
	NUMANodes   []int64  `json:"numaNodes,omitempty"`
}

// State returns a copy of the current state.
func (d *Daemon) State() State {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	s := d.state
	s.Pools = append([]PoolState(nil), s.Pools...)
	return s
}

func (d *Daemon) publishState() {
	var pools []PoolState
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		snap := p.current()
		ps := PoolState{Name: name, Resource: p.resource, Mode: p.pool.Mode, Devices: []DeviceState{}}
		for _, dev := range snap.devices {
			ds := DeviceState{ID: dev.ID, Health: dev.Health, RDMADevices: []string{}}
			for _, r := range snap.byID[dev.ID] {
				ds.RDMADevices = append(ds.RDMADevices, r.Name)
			}
			for _, n := range dev.GetTopology().GetNodes() {
				ds.NUMANodes = append(ds.NUMANodes, n.ID)
			}
			ps.Devices = append(ps.Devices, ds)
			if p.pool.Mode == config.Shared {
				break // the slots are identical; one stands for all
			}
		}
		pools = append(pools, ps)
	}
	d.stateMu.Lock()
	d.state.NodeName, d.state.ConfigFile, d.state.Pools = d.cfg.NodeName, d.cfg.ConfigFile, pools
	d.stateMu.Unlock()
}

func (d *Daemon) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.State())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-d.ready:
			_, _ = w.Write([]byte("ok\n"))
		default:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	})
	return mux
}

var _ pluginapi.DevicePluginServer = (*poolServer)(nil)

// Config returns the configuration the daemon runs with, defaults filled in.
func (d *Daemon) Config() Config { return d.cfg }
