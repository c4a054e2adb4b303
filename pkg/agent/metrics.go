package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// MetricsNamespace is the prefix of the daemon's series; a front end's
// series (allocations, registrations) carry it too.
const MetricsNamespace = "kube_rdma_device_plugin"

const ns = MetricsNamespace

// metrics are the daemon's Prometheus series, on a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	devices      *prometheus.GaugeVec
	reloads      *prometheus.CounterVec
	lastReloadOK prometheus.Gauge
	problems     prometheus.Gauge
	netnsMode    *prometheus.GaugeVec
}

func newMetrics(counters *portCounters) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "devices",
			Help: "Kubelet devices advertised per pool, by health."}, []string{"pool", "health"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "config_reloads_total",
			Help: "Configuration loads, by result (success, failure)."}, []string{"result"}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_last_reload_successful",
			Help: "1 when the last configuration load succeeded; 0 when a bad file was rejected and the last good config runs."}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_problems",
			Help: "Problems with the running configuration on this node (overlaps, shared pool on an exclusive netns node)."}),
		netnsMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "rdma_netns_mode",
			Help: "RDMA subsystem netns mode (shared, exclusive, unknown): 1 for the current mode."}, []string{"mode"}),
	}
	m.reg.MustRegister(m.devices, m.reloads, m.lastReloadOK, m.problems, m.netnsMode,
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

// portCounters exports each port's sysfs counters/ and hw_counters/ files
// (discovery.ReadPortCounters) of the devices in the latest snapshot, read
// at scrape time: nothing is read while no one scrapes.
type portCounters struct {
	sysRoot string
	node    nodeSource
}

var portCounterDesc = prometheus.NewDesc("kube_rdma_port_counter",
	"RDMA port counter from sysfs ports/<n>/counters (source=counters) or hw_counters (source=hw_counters).",
	[]string{"device", "port", "source", "counter"}, nil)

func (c *portCounters) Describe(ch chan<- *prometheus.Desc) { ch <- portCounterDesc }

func (c *portCounters) Collect(ch chan<- prometheus.Metric) {
	if c.node == nil {
		return
	}
	snap, _ := c.node.Latest()
	if snap == nil {
		return
	}
	for _, d := range snap.Node.RDMADevices {
		for _, p := range d.Ports {
			ps := strconv.Itoa(p.Port)
			discovery.ReadPortCounters(c.sysRoot, d.Name, p.Port, func(src, name string, v float64) {
				ch <- prometheus.MustNewConstMetric(portCounterDesc, prometheus.CounterValue, v, d.Name, ps, src, name)
			})
		}
	}
}
