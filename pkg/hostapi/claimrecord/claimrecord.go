// Package claimrecord is the on-disk record of a DRA claim the node agent
// prepared: <dir>/<claim UID>.json, one per claim. pkg/dra writes and
// removes records (Prepare, Unprepare) and checks them for devices another
// claim holds; the CNI plugin (pkg/cni) reads them to find the devices of a
// pod (docs/dra.md, "Netdevs in the pod").
//
// A record is a contract between the agent, which writes it, and the CNI
// plugin, which reads it (docs/upgrades.md): it carries a "version",
// Version is the one this binary writes, and ReadAll follows
// internal/contractver: it reads Version and Version-1 (a record without
// the key, as written before records had one, is version 1) and refuses a
// newer one with an error wrapping contractver.ErrNewer. Version 2 is
// version 1 plus the key, so a reader of version 1 reads it too.
//
// It is the one definition of the format and imports the standard library
// and internal/ only, so the CNI binary, which is exec'd for every ADD and
// DEL, does not link the Kubernetes client libraries of pkg/dra. Records
// survive a reboot (the kubelet keeps claims prepared across one), so Write
// fsyncs them. It reads no sysfs and chooses nothing.
package claimrecord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// Version is the record format this binary writes.
const Version = 2

var format = contractver.Format{Kind: "claim record", Key: "version", First: 1, Current: Version, Unversioned: 1}

// file is a record as stored: the version, then the record's keys.
type file struct {
	Version int `json:"version"`
	Record
}

// DriverName is the DRA driver whose claims the records are (pkg/dra's
// DriverName is this one).
const DriverName = "rdma.kube-rdma.io"

// CDIKind is the CDI kind of the devices a prepared claim reaches its
// containers as ("kube-rdma.io/claim=<claim UID>-<request>"): the runtime
// resolves them from the spec pkg/dra writes, the NRI plugin recognizes a
// container of a claim by them.
const CDIKind = "kube-rdma.io/claim"

// DefaultDir is where the daemon keeps the records with its default
// --dra-plugin-dir (the kubelet's plugin directory of the driver
// rdma.kube-rdma.io, then claims/). The CNI runs on the host and the daemon
// mounts that directory at the same path, so both see it here.
const DefaultDir = "/var/lib/kubelet/plugins/rdma.kube-rdma.io/claims"

// tmpPattern names the temporary files of atomic writes; readers skip
// names that start with ".".
const tmpPattern = ".kube-rdma-*.tmp"

// Record is one prepared claim.
type Record struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// PodUIDs are the pods the claim was reserved for when it was prepared
	// (status.reservedFor, entries of resource "pods"), sorted. The kubelet
	// prepares a claim once per node: a pod that reserves it later is not
	// added.
	PodUIDs []string `json:"podUIDs,omitempty"`
	// Devices are the claim's results of our driver, in the claim's order.
	Devices []Device `json:"devices"`
}

// Device is one allocated device and, for the CNI, the RDMA device it
// was when the claim was prepared.
type Device struct {
	// Request is the request (or "request/subrequest") it was allocated for.
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// AdminAccess: allocated for monitoring or maintenance alongside the
	// claim that uses the device; it neither holds the device nor is
	// refused for it, and its netdev is not moved.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// RDMA is the kernel's RDMA device name at Prepare ("mlx5_3").
	RDMA string `json:"rdmaDevice,omitempty"`
	// PCIAddress is the PCI function of a PF or VF ("0000:3b:00.0"); for
	// an SF, the PF's; "" for a virtual device.
	PCIAddress string `json:"pciAddress,omitempty"`
	// AuxDevice is an SF's auxiliary device ("mlx5_core.sf.2").
	AuxDevice string `json:"auxDevice,omitempty"`
	// ShareID is the allocation's share of a device that several claims
	// hold at once (a shared pool of frontend dra: DRA consumable
	// capacity); "" for a device the claim holds alone. The CNI plugin gives
	// a pod a child netdev of a shared device, never the device's own. An
	// optional key of version 2: a reader that does not know it takes the
	// device for one the claim holds alone (it refuses the second claim).
	ShareID string `json:"shareID,omitempty"`
}

// Shared reports whether other claims may hold the device too.
func (d Device) Shared() bool { return d.ShareID != "" }

// GetsNetdev reports whether the CNI plugin attaches a netdev for the
// device to the claim's pods: never for admin access, for a share only
// when the network gives shared devices' pods netdevs (sharedNetdev other
// than none). The fail-closed checks hold pods to the same rule.
func (d Device) GetsNetdev(sharedNetdev bool) bool {
	return !d.AdminAccess && (!d.Shared() || sharedNetdev)
}

// ID is the most stable name of the device on the node, the one its DRA
// device name is derived from: an SF's auxiliary device, a PF's or VF's
// PCI address, else (rxe, siw) its RDMA name. Probe order and udev renames
// change RDMA names, not these.
func (d Device) ID() string {
	switch {
	case d.AuxDevice != "":
		return d.AuxDevice
	case d.PCIAddress != "":
		return d.PCIAddress
	default:
		return d.RDMA
	}
}

// DRAPool is the DRA pool the driver publishes a configured pool's devices
// in on a node, the Pool of a record's devices: "<node>/<pool>", the
// configured name lowered and its "_" turned into "-" (a DRA pool is the
// driver's, not the node's, so two nodes must not publish the same name).
func DRAPool(node, pool string) string {
	return node + "/" + poolPart(pool)
}

func poolPart(pool string) string { return strings.ReplaceAll(strings.ToLower(pool), "_", "-") }

// OfPool reports whether the device was allocated from the configured
// pool (its DRAPool on whichever node: a node name has no "/").
func (d Device) OfPool(pool string) bool {
	_, p, ok := strings.Cut(d.Pool, "/")
	return ok && pool != "" && p == poolPart(pool)
}

// ForPod reports whether the claim was reserved for the pod.
func (r Record) ForPod(podUID string) bool {
	return podUID != "" && slices.Contains(r.PodUIDs, podUID)
}

// CheckUID refuses a UID that cannot be a file name of its own.
func CheckUID(uid string) error {
	if uid == "" || uid == "." || uid == ".." || strings.ContainsAny(uid, "/\\\x00") || strings.HasPrefix(uid, ".") {
		return fmt.Errorf("bad claim uid %q", uid)
	}
	return nil
}

// Path is the record of claim uid in dir.
func Path(dir, uid string) string { return filepath.Join(dir, uid+".json") }

// Write stores r as Version atomically and durably (readers see the old
// record or the new, never a part, after a crash of the machine too),
// creating dir. A record that is already there byte for byte is not
// rewritten.
func Write(dir string, r Record) error {
	if err := CheckUID(r.UID); err != nil {
		return err
	}
	data, err := json.Marshal(file{Version: Version, Record: r})
	if err != nil {
		return fmt.Errorf("encode claim record %s: %w", r.UID, err)
	}
	path := Path(dir, r.UID)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create claim records dir: %w", err)
	}
	if err := atomicfile.WriteSynced(path, 0o600, tmpPattern, atomicfile.Bytes(data)); err != nil {
		return fmt.Errorf("write claim record %s: %w", r.UID, err)
	}
	return nil
}

// Remove deletes the record of claim uid; one that is not there is fine.
func Remove(dir, uid string) error {
	if err := CheckUID(uid); err != nil {
		return err
	}
	if err := os.Remove(Path(dir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove claim record %s: %w", uid, err)
	}
	return nil
}

// QuarantineDir is the directory, under the records' dir, where ReadAll
// moves the files that do not decode.
const QuarantineDir = "quarantine"

// Damaged is a record file that did not decode (torn by a crash of the
// machine before records were fsynced, or not a record at all): ReadAll
// moved it from Path to Moved, dir/quarantine/<name>.<time> ("" when it
// could not be moved, say on a read-only mount; Err then says why too).
type Damaged = quarantine.Damaged

// ReadAll returns every record in dir, sorted by UID, and the files it
// moved aside. A dir that does not exist is an error that wraps
// fs.ErrNotExist; a record removed while it is listed is left out; a
// record of a version this binary does not read is an error wrapping
// contractver.ErrNewer (or ErrOlder), for the whole read: it is an upgrade
// done halfway, which must be seen. A file that does not decode is not an
// error of the others: it is moved to dir/quarantine/ and returned in
// damaged, once (the caller logs it), so it costs only its own claim,
// which the kubelet's next Prepare writes again.
func ReadAll(dir string) (recs []Record, damaged []Damaged, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read claim records: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, fi, err := quarantine.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // unprepared meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read claim record: %w", err)
		}
		_, err = format.Check(path, data)
		if errors.Is(err, contractver.ErrNewer) || errors.Is(err, contractver.ErrOlder) {
			return nil, nil, err
		}
		var f file
		if err == nil {
			if err = json.Unmarshal(data, &f); err != nil {
				err = fmt.Errorf("decode claim record %s: %w", path, err)
			}
		}
		if err != nil {
			damaged = append(damaged, quarantine.Move(path, filepath.Join(dir, QuarantineDir), e.Name(), fi, time.Now(), err))
			continue
		}
		recs = append(recs, f.Record)
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.UID, b.UID) })
	return recs, damaged, nil
}
