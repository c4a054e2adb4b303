// Package attachment keeps the kube-rdma CNI plugin's per-attachment records
// under a state directory (/var/lib/cni/kube-rdma) and the node-wide lock
// that serializes device claims. A record is written before the first
// change to a device, so a DEL or GC after a crash knows how to restore it.
//
// Records are the claims: a device named in one attachment's record is not
// handed to another. Code that picks devices itself (the GPU-aligned NIC
// binding) takes the same Lock and reads Claimed.
//
// Records are written atomically (temporary file, rename). Those that name
// an IPAM lease, or come last before the IPAM plugin runs, are fsynced, file
// and directory (Save): the network namespace a record names does not
// outlive a boot, but the IPAM lease it names does (host-local keeps its
// leases on disk), so a record of a previous boot must still be whole to be
// released. The others (SaveNoSync) only need to survive a crash of the
// plugin, which an atomic rename gives. Each record carries the boot ID it was
// written under; records of another boot are not this boot's claims. A
// record that does not decode (torn, truncated, not a record) is moved
// aside into <Dir>/quarantine/ by List, Load and LoadPrevious, its bytes
// kept, and handed to Store.Damaged once: it costs its own attachment only,
// which is then as if it had no record (package internal/quarantine). A
// record of another boot stays on disk until the plugin released its IPAM lease
// and removed it (List returns it apart; SavePrevious notes a failed
// release in its Release, keeping its boot ID).
//
// A record is a contract between the CNI plugin, which writes it, and the
// agent, which reads it for the node state (docs/upgrades.md): its "schema"
// is the version, Version is the one this binary writes, and the reader
// follows internal/contractver. This binary reads versions 2 and 1. It
// writes version 1 for every record but one with a child netdev (Device.Child,
// a shared pool's pod), which is version 2: a reader of version 1 would take
// such a record for a moved netdev (and move the pod's child to the host as
// the NIC), so it must refuse it, as it does a newer version, by name
// (docs/upgrades.md). The CNI plugin makes children only where its netconf
// opts in (sharedNetdev, none by default in this release), so by default it
// writes version 1 only, which a rolled-back plugin reads. A record of a
// newer version is an error wrapping contractver.ErrNewer, never taken for
// a stale or a torn one (List neither removes it nor moves it aside).
//
// It imports the standard library and internal/ only (the flock and stat
// calls are package syscall's), does no netlink and no logging.
package attachment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/jsonkeep"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// ErrNotFound is returned by Load when there is no record.
var ErrNotFound = errors.New("attachment record not found")

const (
	lockFile   = "lock"
	recordExt  = ".json"
	holdExt    = ".lock"
	tmpPattern = ".tmp-*"
)

// Version is the newest record schema this binary writes and reads: a
// record with a child netdev. VersionMoved is the schema of every other
// record, the one releases before child netdevs wrote and read.
const (
	Version      = 2
	VersionMoved = 1
)

var format = contractver.Format{Kind: "attachment record", Key: "schema", First: 1, Current: Version}

// schema is the version a record is written as: VersionMoved unless a device
// is a child netdev, which a reader of VersionMoved would misread.
func (a Attachment) schema() int {
	for _, d := range a.Devices {
		if d.Child != "" {
			return Version
		}
	}
	return VersionMoved
}

// Key names one attachment, as the runtime does.
type Key struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

func (k Key) String() string { return k.ContainerID + "/" + k.IfName }

func (k Key) file() (string, error) {
	for _, s := range []string{k.ContainerID, k.IfName} {
		if s == "" || strings.ContainsAny(s, "/\x00") || s == "." || s == ".." {
			return "", fmt.Errorf("attachment %q: container ID and interface name must be plain names", k)
		}
	}
	return k.ContainerID + "_" + k.IfName + recordExt, nil
}

// HostLink is a netdev's state in the host namespace before ADD.
type HostLink struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	MTU   int    `json:"mtu"`
	MAC   string `json:"mac"`
	Up    bool   `json:"up"`
}

// Device is one device of an attachment: what it was on the host and what it
// became in the pod.
type Device struct {
	// RDMA is the RDMA device name, the claim key ("mlx5_0", "rxe0").
	RDMA string `json:"rdma"`
	// Kind is the device's function kind as discovery has it ("PF",
	// "VF", "SF", "virtual"); AuxDevice is an SF's auxiliary device
	// ("mlx5_core.sf.2"), whose PCIAddress is its PF's. DEL finds a NIC
	// whose pod netns is gone by its function's netdev (under any name and
	// MAC) only when Kind says which function that is. Both added to
	// version 1 without a bump, as IPs (a reader of version 1 ignores
	// them; docs/upgrades.md).
	Kind       string   `json:"kind,omitempty"`
	PCIAddress string   `json:"pciAddress,omitempty"`
	AuxDevice  string   `json:"auxDevice,omitempty"`
	Host       HostLink `json:"host"`
	PodIfName  string   `json:"podIfName"`
	PodMAC     string   `json:"podMAC,omitempty"`
	// SoftType is the link type of a software RDMA device ("rxe"), which
	// cannot change netns: it is re-created on its netdev in the pod, as
	// PodRDMA, and again on the host after DEL. "" for hardware.
	SoftType string `json:"softType,omitempty"`
	PodRDMA  string `json:"podRDMA,omitempty"`
	// RDMAExclusive is set when the RDMA device lives in the pod's netns
	// (exclusive netns mode): a hardware one moved there, a soft one
	// (PodRDMA) re-created and moved there, which DEL deletes there.
	RDMAExclusive bool `json:"rdmaExclusive,omitempty"`
	// IPAM is set once the IPAM plugin allocated for PodIfName.
	IPAM bool `json:"ipam,omitempty"`
	// IPs are the addresses IPAM gave PodIfName, in CIDR notation
	// ("10.56.0.7/16"), as the ADD result has them; empty without IPAM.
	// The daemon reports them in the claim's status (pkg/claimstatus).
	// Added to version 1 without a bump: a reader of version 1 decodes
	// without refusing unknown keys and ignores it (docs/upgrades.md).
	IPs []string `json:"ips,omitempty"`
	// AwaitSince is when a DEL or GC first waited for the device's netdev
	// to come back from a pod netns that is gone; the wait ends for good
	// (the device given up) a bound after it. Added to version 1 without a
	// bump: a reader that drops it only restarts that bound.
	AwaitSince *time.Time `json:"awaitSince,omitempty"`
	// Returned is set once DEL or GC gave the device back to the host:
	// only its IPAM release is left, and it is no longer claimed.
	Returned bool `json:"returned,omitempty"`
	// Child is set when the pod got a child netdev of the NIC's netdev
	// rather than the netdev itself (a shared pool): its kind, "macvlan",
	// "ipvlan" or "ipoib". Host is then the parent, which never leaves the
	// host; PodIfName and PodMAC name the child, which DEL deletes (one
	// whose netns is gone died with it: nothing to give back). The RDMA
	// device never moves. Several attachments may hold children of one
	// device; an exclusive one may not hold it meanwhile. A record with a
	// child is schema 2.
	Child string `json:"child,omitempty"`
	// Unknown are the keys of the device a newer writer added that this
	// binary does not know: written back as read (internal/jsonkeep).
	Unknown jsonkeep.Unknown `json:"-"`
}

// UnmarshalJSON decodes a device, keeping the keys it does not know.
func (d *Device) UnmarshalJSON(b []byte) error {
	type plain Device
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	p.Unknown = jsonkeep.Split(b, reflect.TypeFor[plain]())
	*d = Device(p)
	return nil
}

// MarshalJSON encodes a device with the keys it read and did not know.
func (d Device) MarshalJSON() ([]byte, error) {
	type plain Device
	b, err := json.Marshal(plain(d))
	if err != nil {
		return nil, err
	}
	return jsonkeep.Merge(b, d.Unknown)
}

// PodRef is the pod an attachment is for, from the runtime's CNI_ARGS
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID).
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Attachment is one ADD's record.
type Attachment struct {
	Schema int    `json:"schema"`
	BootID string `json:"bootID,omitempty"`
	Key
	// Pod is nil when the runtime named no pod (and in records written
	// before the field existed).
	Pod        *PodRef  `json:"pod,omitempty"`
	Netns      string   `json:"netns"`
	CNIVersion string   `json:"cniVersion"`
	Network    string   `json:"network"`
	Devices    []Device `json:"devices"`
	// Complete is set when ADD finished; a record without it is an ADD that
	// failed half way (or crashed) and must be undone.
	Complete bool `json:"complete"`
	// IPAMConf is the stdin the IPAM plugin got, for a DEL or GC that has
	// no configuration of its own.
	IPAMConf json.RawMessage `json:"ipamConf,omitempty"`
	// Binding is set when the devices were chosen by the plugin for a
	// gpuAligned pool rather than named by the kubelet. The devices are
	// claimed through Devices as for any attachment; this says why.
	Binding *Binding `json:"binding,omitempty"`
	// Release is set on a record of a previous boot whose IPAM release
	// failed: the plugin tries again where it finds the record. Only
	// records of another boot carry it, so a reader of version 1 that
	// ignores the key takes the record for what it is (no version bump:
	// docs/upgrades.md).
	Release *Release `json:"release,omitempty"`
	// Unknown are the keys a newer writer added that this binary does not
	// know (a rollback, or two binaries of the node at different versions
	// writing one record): written back as read, never dropped
	// (internal/jsonkeep). A newer schema is refused, not rewritten.
	Unknown jsonkeep.Unknown `json:"-"`
}

// UnmarshalJSON decodes a record, keeping the keys it does not know.
func (a *Attachment) UnmarshalJSON(b []byte) error {
	type plain Attachment
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	p.Unknown = jsonkeep.Split(b, reflect.TypeFor[plain]())
	*a = Attachment(p)
	return nil
}

// MarshalJSON encodes a record with the keys it read and did not know.
func (a Attachment) MarshalJSON() ([]byte, error) {
	type plain Attachment
	b, err := json.Marshal(plain(a))
	if err != nil {
		return nil, err
	}
	return jsonkeep.Merge(b, a.Unknown)
}

// Release counts the failed IPAM releases of a record of a previous boot.
type Release struct {
	// Tries is the number of failed releases; Since the time of the first.
	Tries int       `json:"tries"`
	Since time.Time `json:"since"`
	// Err is the last failure, for whoever reads the record.
	Err string `json:"error,omitempty"`
}

// Binding is the GPU-aligned choice behind an attachment's devices.
type Binding struct {
	// Pool is the gpuAligned pool the devices came from.
	Pool string `json:"pool"`
	// Pairs has one entry per GPU of the pod, in the pod's order.
	Pairs []BindingPair `json:"pairs,omitempty"`
	// AllocIDs are the allocation directories ADD wrote (one per container
	// holding slots of the pool), under <allocDir>/<Pool>/.
	AllocIDs []string `json:"allocIDs,omitempty"`
}

// BindingPair is one GPU of the pod and the NIC bound for it.
type BindingPair struct {
	// GPU is the GPU's PCI address; GPUID the kubelet's ID of it.
	GPU   string `json:"gpu"`
	GPUID string `json:"gpuID,omitempty"`
	// NIC is the RDMA device paired with the GPU, "" when the pod has
	// fewer NICs than GPUs; Level the PCIe distance between them ("PIX").
	NIC   string `json:"nic,omitempty"`
	Level string `json:"level,omitempty"`
}

// Store is a state directory.
type Store struct {
	Dir string
	// BootID is the current boot's ID (/proc/sys/kernel/random/boot_id);
	// records written under another are stale. "" disables the check.
	BootID string
	// Damaged, when set, is called with each record that did not decode,
	// once: when List, Load or LoadPrevious moved it aside (or failed to:
	// Moved is "" then). The plugin logs it.
	Damaged func(Damaged)
}

// QuarantineDir is the directory, under the state directory, where the
// records that do not decode are moved.
const QuarantineDir = "quarantine"

// Damaged is a record that did not decode: moved from Path to Moved,
// <Dir>/quarantine/<name>.<time> ("" when it could not be moved; Err then
// says why too). As an error it wraps quarantine.ErrDamaged.
type Damaged = quarantine.Damaged

// ErrStale marks a record of another boot.
var ErrStale = errors.New("stale attachment record")

// ReadBootID reads the kernel's boot ID from procRoot ("/proc").
func ReadBootID(procRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Lock takes the node-wide lock (flock on <Dir>/lock), creating the
// directory when needed. Call the returned function to release it.
func (s Store) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
}

// Save writes a record atomically (temporary file, rename), fsynced, file
// and directory: for a record that names an IPAM lease, or is the last
// before the IPAM plugin runs, which a previous boot's release needs whole.
func (s Store) Save(a Attachment) error { return s.save(a, true) }

// SaveNoSync is Save without the fsyncs, for a record that nothing outlives
// the boot of: no IPAM lease named or to come before the next Save. A
// plugin killed at any step leaves it whole (the rename is atomic, and
// every process reads the same page cache); a machine crash may leave it
// torn or missing, and the reboot has then undone all it names (the pod
// netns is gone, the NIC back on the host). Each fsync (file and directory)
// costs ~2.5 ms of an ADD on a 2-core VM's ext4 (make bench-cni: record1 and
// record2), a quarter of the plugin's own work.
func (s Store) SaveNoSync(a Attachment) error { return s.save(a, false) }

func (s Store) save(a Attachment, sync bool) error {
	name, err := a.Key.file()
	if err != nil {
		return err
	}
	a.Schema = a.schema()
	a.BootID = s.BootID
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record %s: %w", a.Key, err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	path := filepath.Join(s.Dir, name)
	if sync {
		err = atomicfile.WriteSynced(path, 0o600, tmpPattern, atomicfile.Bytes(data))
	} else {
		err = atomicfile.Write(path, data, 0o600, tmpPattern)
	}
	if err != nil {
		return fmt.Errorf("write record %s: %w", a.Key, err)
	}
	return nil
}

// SavePrevious writes a record of another boot as it is (its boot ID
// kept), atomically: a failed IPAM release noted in Release. It refuses a
// record of this boot, which Save writes.
func (s Store) SavePrevious(a Attachment) error {
	if s.BootID == "" || a.BootID == s.BootID {
		return fmt.Errorf("record %s is not of a previous boot", a.Key)
	}
	name, err := a.Key.file()
	if err != nil {
		return err
	}
	a.Schema = a.schema()
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record %s: %w", a.Key, err)
	}
	if err := atomicfile.WriteSynced(filepath.Join(s.Dir, name), 0o600, tmpPattern, atomicfile.Bytes(data)); err != nil {
		return fmt.Errorf("write record %s: %w", a.Key, err)
	}
	return nil
}

// Load reads one record; ErrNotFound when there is none or it is stale
// (of another boot: LoadPrevious reads it). A record that does not decode
// is moved aside (Store.Damaged) and is none: the error wraps ErrNotFound
// and quarantine.ErrDamaged.
func (s Store) Load(k Key) (Attachment, error) {
	name, err := k.file()
	if err != nil {
		return Attachment{}, err
	}
	a, err := s.read(filepath.Join(s.Dir, name))
	if errors.Is(err, ErrStale) {
		return Attachment{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return a, s.moveTorn(name, err)
}

// LoadPrevious reads one record of another boot; ErrNotFound when there is
// none, it is of this boot or it does not decode (moved aside as by Load).
func (s Store) LoadPrevious(k Key) (Attachment, error) {
	name, err := k.file()
	if err != nil {
		return Attachment{}, err
	}
	path := filepath.Join(s.Dir, name)
	a, err := s.decode(path)
	if err != nil {
		return Attachment{}, s.moveTorn(name, err)
	}
	if !s.previous(a) {
		return Attachment{}, fmt.Errorf("record %s is of this boot: %w", path, ErrNotFound)
	}
	return a, nil
}

// previous reports whether a is a record of another boot.
func (s Store) previous(a Attachment) bool { return s.BootID != "" && a.BootID != s.BootID }

func (s Store) read(path string) (Attachment, error) {
	a, err := s.decode(path)
	if err != nil {
		return Attachment{}, err
	}
	if s.previous(a) {
		return Attachment{}, fmt.Errorf("record %s is from boot %s: %w", path, a.BootID, ErrStale)
	}
	return a, nil
}

// tornError is a record that does not decode, as decode found it.
type tornError struct {
	path  string
	read  os.FileInfo
	cause error
}

func (e *tornError) Error() string { return e.cause.Error() }
func (e *tornError) Unwrap() error { return e.cause }

// moveTorn moves the record decode found torn aside and returns an error
// wrapping ErrNotFound and the Damaged; any other err is returned as is.
func (s Store) moveTorn(name string, err error) error {
	var torn *tornError
	if !errors.As(err, &torn) {
		return err
	}
	d := quarantine.Move(torn.path, filepath.Join(s.Dir, QuarantineDir), name, torn.read, time.Now(), torn.cause)
	if s.Damaged != nil {
		s.Damaged(d)
	}
	return fmt.Errorf("%w: %w", ErrNotFound, &d)
}

// decode reads a record of any boot. One that does not decode is a
// *tornError (for moveTorn).
func (s Store) decode(path string) (Attachment, error) {
	data, read, err := quarantine.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Attachment{}, fmt.Errorf("read %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("read %s: %w", path, err)
	}
	// The version first: a record of a newer schema may not decode as
	// this one, and must not be taken for a torn one and removed.
	var verr *contractver.VersionError
	if _, err := format.Check(path, data); errors.As(err, &verr) {
		return Attachment{}, err
	}
	var a Attachment
	if err := json.Unmarshal(data, &a); err != nil {
		return Attachment{}, &tornError{path: path, read: read, cause: fmt.Errorf("decode %s: %w", path, err)}
	}
	return a, nil
}

// Delete removes a record; a missing record is not an error.
func (s Store) Delete(k Key) error {
	name, err := k.file()
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete record %s: %w", k, err)
	}
	return nil
}

// List returns every record of this boot and, apart, every record of
// another boot, which it leaves in place: their IPAM leases outlive the
// boot, and the plugin removes each once released. It moves records that
// do not decode aside (Store.Damaged), and lists the others. Call it with
// the lock held. Unreadable records (of a newer version, say) are returned
// as errors joined, alongside the readable ones.
func (s Store) List() (cur, prev []Attachment, err error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list state dir: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), recordExt) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		a, err := s.decode(filepath.Join(s.Dir, e.Name()))
		if err != nil {
			err = s.moveTorn(e.Name(), err)
		}
		if errors.Is(err, ErrNotFound) {
			continue // deleted since ReadDir (a DEL finishing without the lock)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s.previous(a) {
			prev = append(prev, a)
		} else {
			cur = append(cur, a)
		}
	}
	return cur, prev, errors.Join(errs...)
}

// Records returns every readable record of this boot without the lock and
// without removing anything (the directory may be mounted read-only): for
// readers outside the plugin, such as the daemon's node state. Records are
// replaced by rename, so each one read is whole; the set may be a moment
// old. Records of another boot, torn ones (which the plugin moves aside)
// and unreadable ones are skipped.
func (s Store) Records() ([]Attachment, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list state dir: %w", err)
	}
	var out []Attachment
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), recordExt) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if a, err := s.read(filepath.Join(s.Dir, e.Name())); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// HasRecords reports whether the directory holds a record of this boot,
// without the lock and without removing anything (it may be mounted
// read-only): the installer keeps the plugin binary while a pod is attached,
// since its DEL needs it. Stale records and torn ones (left in place: the
// plugin moves them aside) do not count; a record that cannot be read for
// another reason (a newer version) does (it may be an attachment).
func (s Store) HasRecords() (bool, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("list state dir: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), recordExt) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		_, err := s.read(filepath.Join(s.Dir, e.Name()))
		var torn *tornError
		if !errors.Is(err, ErrStale) && !errors.Is(err, ErrNotFound) && !errors.As(err, &torn) {
			return true, nil
		}
	}
	return false, nil
}

// Claimed maps each claimed RDMA device to the attachment holding it, and
// returns the records of another boot as List does. Call it with the lock
// held. A device with child netdevs is claimed too (by one of the
// attachments holding them): no exclusive attachment may take it; an ADD of
// another child reads the holder's record (Device.Child) to tell.
func (s Store) Claimed() (map[string]Key, []Attachment, error) {
	recs, prev, err := s.List()
	return claimsOf(recs), prev, err
}

// claimsOf maps each RDMA device that recs claim to the attachment holding it.
func claimsOf(recs []Attachment) map[string]Key {
	claims := map[string]Key{}
	for _, a := range recs {
		for _, d := range a.Devices {
			if !d.Returned {
				claims[d.RDMA] = a.Key
			}
		}
	}
	return claims
}

// Hold takes the attachment's own lock (flock on <Dir>/<key>.lock): ADD
// holds it from before its record exists until it returns, DEL and GC while
// they undo the attachment. With wait it blocks until the lock is free;
// without, it returns ok=false when another process holds it (GC skips an
// attachment in flight). Call release to drop it; the last holder removes
// the file. Unlike Lock it is held through IPAM, which may hang: only the
// same attachment waits for it.
func (s Store) Hold(k Key, wait bool) (release func(), ok bool, err error) {
	name, err := k.file()
	if err != nil {
		return nil, false, err
	}
	path := filepath.Join(s.Dir, strings.TrimSuffix(name, recordExt)+holdExt)
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create state dir: %w", err)
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("open hold file: %w", err)
		}
		for {
			err = syscall.Flock(int(f.Fd()), how)
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EWOULDBLOCK {
			_ = f.Close()
			return nil, false, nil
		}
		if err != nil {
			_ = f.Close()
			return nil, false, fmt.Errorf("hold %s: %w", path, err)
		}
		// The holder before us removes the file when it is done: a lock on
		// a file no longer at path guards nothing, so take the new one.
		var held, now syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return func() {
				_ = os.Remove(path)
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, true, nil
		}
		_ = f.Close()
	}
}

// Writable checks that records can be written in the state directory.
func (s Store) Writable() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.CreateTemp(s.Dir, tmpPattern)
	if err != nil {
		return fmt.Errorf("state dir %s is not writable: %w", s.Dir, err)
	}
	_ = f.Close()
	return os.Remove(f.Name())
}
