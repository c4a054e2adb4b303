package v1alpha1

import (
	"fmt"
	"slices"
	"strings"
)

// NewSummaryTable is the list-view text of st, from its pools and devices:
// what the publisher writes to status.summary.table and what kubectl rdma
// prints for a state whose writer did not.
func NewSummaryTable(st *RDMANodeStateStatus) *SummaryTable {
	pools := make([]string, 0, len(st.Pools))
	for _, p := range st.Pools {
		pools = append(pools, fmt.Sprintf("%s %d/%d/%d", p.Name, p.Allocated, p.Allocatable, p.Capacity))
	}
	var unhealthy, links []string
	for _, d := range st.Devices {
		if !d.Healthy {
			unhealthy = append(unhealthy, d.Name)
		}
		if d.LinkLayer != "" && !slices.Contains(links, d.LinkLayer) {
			links = append(links, d.LinkLayer)
		}
	}
	slices.Sort(links)
	return &SummaryTable{Pools: strings.Join(pools, ", "), UnhealthyDevices: strings.Join(unhealthy, ","),
		LinkLayers: strings.Join(links, ",")}
}
