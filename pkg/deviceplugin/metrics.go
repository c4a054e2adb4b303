package deviceplugin

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const ns = "kube_rdma_device_plugin"

// metrics are the daemon's Prometheus series, on a registry of its own.
type metrics struct {
	reg           *prometheus.Registry
	devices       *prometheus.GaugeVec
	allocations   *prometheus.CounterVec
	registrations *prometheus.CounterVec
	reloads       *prometheus.CounterVec
	lastReloadOK  prometheus.Gauge
	problems      prometheus.Gauge
	netnsMode     *prometheus.GaugeVec
}

func newMetrics(counters *portCounters) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "devices",
			Help: "Kubelet devices advertised per pool, by health."}, []string{"pool", "health"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "allocations_total",
			Help: "Allocate container requests per pool, by result."}, []string{"pool", "result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "registrations_total",
			Help: "Registrations with the kubelet per pool, by result."}, []string{"pool", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "config_reloads_total",
			Help: "Configuration loads, by result (success, failure)."}, []string{"result"}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_last_reload_successful",
			Help: "1 when the last configuration load succeeded; 0 when a bad file was rejected and the last good config runs."}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_problems",
			Help: "Problems with the running configuration on this node (overlaps, shared pool on an exclusive netns node)."}),
		netnsMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "rdma_netns_mode",
			Help: "RDMA subsystem netns mode (shared, exclusive, unknown): 1 for the current mode."}, []string{"mode"}),
	}
	m.reg.MustRegister(m.devices, m.allocations, m.registrations, m.reloads, m.lastReloadOK, m.problems, m.netnsMode,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if counters != nil {
		m.reg.MustRegister(counters)
	}
	return m
}

func result(ok bool) string {
	if ok {
		return "success"
	}
	return "failure"
}

// A nil *metrics records nothing, so pool servers work without one.
func (m *metrics) allocation(pool string, ok bool) {
	if m != nil {
		m.allocations.WithLabelValues(pool, result(ok)).Inc()
	}
}

func (m *metrics) registration(pool string, ok bool) {
	if m != nil {
		m.registrations.WithLabelValues(pool, result(ok)).Inc()
	}
}

func (m *metrics) reload(ok bool) {
	m.reloads.WithLabelValues(result(ok)).Inc()
	if ok {
		m.lastReloadOK.Set(1)
	} else {
		m.lastReloadOK.Set(0)
	}
}

func (m *metrics) setDevices(pool string, healthy, unhealthy int) {
	m.devices.WithLabelValues(pool, "Healthy").Set(float64(healthy))
	m.devices.WithLabelValues(pool, "Unhealthy").Set(float64(unhealthy))
}

// forgetPool drops the device gauges of a pool that no longer exists.
func (m *metrics) forgetPool(pool string) {
	m.devices.DeletePartialMatch(prometheus.Labels{"pool": pool})
}

func (m *metrics) setNetnsMode(mode rdma.NetnsMode) {
	m.netnsMode.Reset()
	m.netnsMode.WithLabelValues(string(mode)).Set(1)
}

// portCounters exports each port's sysfs counters/ and hw_counters/ files,
// read at scrape time (nothing is read while no one scrapes).
type portCounters struct {
	sysRoot string
	mu      sync.Mutex
	ports   map[string][]int // device -> ports, from the last scan
	desc    *prometheus.Desc
}

func newPortCounters(sysRoot string) *portCounters {
	return &portCounters{sysRoot: sysRoot, ports: map[string][]int{},
		desc: prometheus.NewDesc("kube_rdma_port_counter",
			"RDMA port counter from sysfs ports/<n>/counters (source=counters) or hw_counters (source=hw_counters).",
			[]string{"device", "port", "source", "counter"}, nil)}
}

func (c *portCounters) setPorts(p map[string][]int) {
	c.mu.Lock()
	c.ports = p
	c.mu.Unlock()
}

func (c *portCounters) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *portCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	ports := c.ports
	c.mu.Unlock()
	for _, dev := range sortedKeys(ports) {
		for _, p := range ports[dev] {
			ps := strconv.Itoa(p)
			for _, src := range []string{"counters", "hw_counters"} {
				dir := filepath.Join(c.sysRoot, "class/infiniband", dev, "ports", ps, src)
				entries, err := os.ReadDir(dir)
				if err != nil {
					continue
				}
				for _, e := range entries {
					if e.IsDir() {
						continue
					}
					data, err := os.ReadFile(filepath.Join(dir, e.Name()))
					if err != nil {
						continue
					}
					v, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
					if err != nil {
						continue
					}
					ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, dev, ps, src, e.Name())
				}
			}
		}
	}
}
