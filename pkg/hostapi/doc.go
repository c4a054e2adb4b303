// Package hostapi is the home of the files kube-rdma's processes hand each
// other on a node's disk, one package per contract; neither side owns them:
//
//   - attachment: the CNI plugin's attachment records (written by the
//     plugin, read by it and by the agent's node state);
//   - claimrecord: the records of prepared DRA claims (written by the DRA
//     front end, read by the CNI plugin);
//   - allocdir: the directory of gpuAligned pools, with pool.json (written
//     by the device plugin front end, read by the CNI plugin) and the
//     allocation directories;
//   - nodepools: the node's pools file, every served pool's devices
//     (written by the device plugin daemon, read by the CNI plugin);
//   - cniops: the CNI plugin's operations spool, one line per command
//     (appended by the plugin, read and removed by the daemon's metrics).
//
// Each format carries a version and follows internal/contractver: readers
// accept the current version and the previous one, and refuse a newer one
// by name (docs/upgrades.md). Writers replace files atomically and fsync
// them (cniops appends lines, each in one write, and its reader skips torn
// ones). A reader moves a file that does not decode aside, its bytes kept
// (internal/quarantine), and goes on with the others: it costs only its own
// pod, claim or pool, never a version error's refusal. The
// packages link the standard library and internal/ only
// (internal/importrules checks it), so either side reads them without the
// other's dependencies. This package itself holds no code.
package hostapi
