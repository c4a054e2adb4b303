package attachment

// Lent returns the RDMA devices that recs put out of the host network
// namespace's sight, by name (Device.RDMA, the host's name): a hardware
// device moved into its pod's namespace (RDMAExclusive, the exclusive RDMA
// netns mode), and a soft one (SoftType), which the kernel destroys when its
// netdev leaves for the pod and which is re-created in the pod (in the
// exclusive mode moved there, as PodRDMA). A device counts from the record's
// first save, before the move and before Complete (the plugin saves the
// record first: a half-done ADD has moved it already, or is about to), until
// DEL or GC gives it back (Returned) or removes the record. A child netdev's
// device never leaves the host. The daemon keeps these devices in their
// pools while it cannot see them (pkg/agent, LentDevices); pass it this
// boot's records (Store.Records).
func Lent(recs []Attachment) map[string]bool {
	out := map[string]bool{}
	for _, a := range recs {
		for _, d := range a.Devices {
			if !d.Returned && d.Child == "" && (d.RDMAExclusive || d.SoftType != "") {
				out[d.RDMA] = true
			}
		}
	}
	return out
}
