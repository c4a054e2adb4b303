package nodestate

import "github.com/prometheus/client_golang/prometheus"

var (
	okDesc = prometheus.NewDesc("kube_rdma_node_state_publisher_ok",
		"1 once an RDMANodeState write succeeded and the last attempt did not fail, 0 otherwise.", nil, nil)
	failuresDesc = prometheus.NewDesc("kube_rdma_node_state_write_failures",
		"RDMANodeState writes that failed since the last successful one.", nil, nil)
	writesDesc = prometheus.NewDesc("kube_rdma_node_state_writes_total",
		"Successful RDMANodeState writes since the daemon started.", nil, nil)
)

// Describe and Collect make the publisher a prometheus.Collector of its
// health, read from its Report at scrape time.
func (p *Publisher) Describe(ch chan<- *prometheus.Desc) {
	ch <- okDesc
	ch <- failuresDesc
	ch <- writesDesc
}

// Collect implements prometheus.Collector.
func (p *Publisher) Collect(ch chan<- prometheus.Metric) {
	r := p.Report()
	ok := 0.0
	if r.OK {
		ok = 1
	}
	ch <- prometheus.MustNewConstMetric(okDesc, prometheus.GaugeValue, ok)
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.GaugeValue, float64(r.Failures))
	ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(r.Writes))
}
