// Package checkpoint keeps a crash-safe, per-claim record of the resource
// claims the kubelet plugin has prepared, so that a restarted plugin can tell
// which claims were fully prepared and which were interrupted half way.
//
// Every claim has its own file, <Dir>/<bootID>/<claimUID>.json, so
// independent claims never contend on a shared file or lock. A record moves through the states
// PrepareStarted (written before any side effect), PrepareCompleted (written
// after all side effects) and optionally UnprepareStarted; it is deleted at
// the end of unprepare.
//
// # On-disk format
//
// Each file holds a JSON envelope:
//
//	{"version":1,"checksum":"sha256:<hex>","data":{...ClaimRecord...}}
//
// The checksum is the SHA-256 of the exact bytes of the "data" value as they
// appear in the file. Readers ignore fields they do not know, both in the
// envelope and in the record, so that a record written by a newer binary can
// still be read by an older one.
//
// # Versioning
//
// CurrentVersion is bumped only for incompatible changes: a field that is
// removed, renamed or whose meaning changes, or a new State value that an
// older binary would not know how to recover. Compatible additions, such as a
// new optional field that older binaries may safely ignore, keep the version
// unchanged. A reader refuses records whose version is newer than the one it
// understands and reports them as corrupt, so that it never acts on data it
// could misinterpret.
//
// # Damage
//
// A record that cannot be read (bad JSON, truncated, checksum mismatch,
// unsupported version) is reported as a *CorruptError and is never deleted
// automatically: deleting it could leak a GPU that a running container still
// uses. README.md in this directory describes how an operator recovers.
//
// # Reboots
//
// Records live in a directory per boot, and every record also carries the
// boot ID. Records from an earlier boot are stale: their containers are gone
// and the kubelet prepares the claims again. Store.LoadAll reports them
// separately (unreadable ones too: a power loss, which always means a
// reboot, can only have torn files of an earlier boot) and deletes nothing;
// Store.PruneStale removes them once the caller has cleaned up.
//
// # Durability
//
// Put fsyncs the record before renaming it into place. PutVolatile skips the
// fsync: its record survives a crash of the process (the kernel has it) but
// not a power loss, which is fine for records that only matter until the
// next reboot, such as PrepareStarted.
package checkpoint

import (
	"encoding/json"
	"time"
)

// CurrentVersion is the envelope version this package writes and the newest
// one it reads. See the package documentation for when it changes.
const CurrentVersion = 1

// State is the phase a claim's preparation has reached.
type State string

const (
	// PrepareStarted is written before preparation has any side effect.
	PrepareStarted State = "PrepareStarted"
	// PrepareCompleted is written once every side effect of preparation
	// (CDI spec, device configuration) is in place.
	PrepareCompleted State = "PrepareCompleted"
	// UnprepareStarted is written when unpreparation begins; the record is
	// deleted once unpreparation has finished.
	UnprepareStarted State = "UnprepareStarted"
)

// Valid reports whether s is one of the states this version knows.
func (s State) Valid() bool {
	switch s {
	case PrepareStarted, PrepareCompleted, UnprepareStarted:
		return true
	}
	return false
}

// ClaimRecord is what the plugin remembers about one prepared claim.
type ClaimRecord struct {
	// UID of the ResourceClaim; also the file name of the record.
	UID string `json:"uid"`
	// Namespace of the ResourceClaim.
	Namespace string `json:"namespace"`
	// Name of the ResourceClaim.
	Name string `json:"name"`
	// State of preparation.
	State State `json:"state"`
	// BootID of the boot in which the record was written. Set by Store.Put.
	BootID string `json:"bootID"`
	// Updated is when the record was written. Set by Store.Put.
	Updated time.Time `json:"updated"`
	// Devices allocated to the claim.
	Devices []Device `json:"devices"`
	// MPS is the claim's MPS control daemon of configuration group 0, if
	// it has one (internal/plugin/sharing); the only one a record of a
	// version before daemons per group has.
	MPS *MPSDaemon `json:"mps,omitempty"`
	// MPSGroups are its daemons of further configuration groups (1, 2, …),
	// each of a group whose MPS settings differ from the others'.
	MPSGroups []MPSDaemon `json:"mpsGroups,omitempty"`
	// FabricPartition is the NVSwitch Fabric Manager partition the claim's
	// GPUs form (--fabric-manager-partitioning), recorded with
	// PrepareStarted, before it is activated, so that a rollback, Recover
	// and unprepare know what to deactivate; nil when none is.
	FabricPartition *FabricPartition `json:"fabricPartition,omitempty"`
}

// FabricPartition is a Fabric Manager partition a claim activates.
type FabricPartition struct {
	// ID is Fabric Manager's partition ID.
	ID int `json:"id"`
	// Modules are the module IDs of its GPUs (the claim's), ascending.
	Modules []int `json:"modules"`
}

// MPSDaemons lists the claim's MPS control daemons, group 0's first.
func (r *ClaimRecord) MPSDaemons() []*MPSDaemon {
	if r.MPS == nil {
		return nil
	}
	out := []*MPSDaemon{r.MPS}
	for i := range r.MPSGroups {
		out = append(out, &r.MPSGroups[i])
	}
	return out
}

// SetMPSDaemons records the claim's MPS control daemons, group 0's first
// (none: no daemon), in the fields MPSDaemons reads them from.
func (r *ClaimRecord) SetMPSDaemons(daemons []MPSDaemon) {
	r.MPS, r.MPSGroups = nil, nil
	if len(daemons) == 0 {
		return
	}
	r.MPS = &daemons[0]
	if len(daemons) > 1 {
		r.MPSGroups = daemons[1:]
	}
}

// MPSDaemon is an MPS control daemon that the plugin runs for a claim.
type MPSDaemon struct {
	// Group is the daemon's configuration group (0 for the claim's first).
	Group int `json:"group,omitempty"`
	// PID of the daemon process (0 while it is being started).
	PID int `json:"pid"`
	// Dir holds the daemon's pipe/ and log/ directories.
	Dir string `json:"dir"`
	// Devices are the UUIDs the daemon serves, in its device-ordinal order.
	Devices []string `json:"devices"`
	// ActiveThreadPercentage is the default for clients; 0 means unset.
	ActiveThreadPercentage int32 `json:"activeThreadPercentage,omitempty"`
	// PinnedMemoryLimits are per device (same order as Devices), in bytes;
	// 0 means no limit.
	PinnedMemoryLimits []int64 `json:"pinnedMemoryLimits,omitempty"`
}

// Device is one allocated device of a claim.
type Device struct {
	// Pool is the ResourceSlice pool of the device.
	Pool string `json:"pool"`
	// Name is the device name in the ResourceSlice, e.g. "gpu-3".
	Name string `json:"name"`
	// Requests are the names of the claim requests this device satisfies,
	// as given in the allocation result.
	Requests []string `json:"requests"`
	// UUID of the GPU.
	UUID string `json:"uuid"`
	// ShareID identifies the sharing group when the GPU is shared.
	ShareID string `json:"shareID,omitempty"`
	// ConsumedMemory is the memory, in bytes, a consumable share consumed
	// (the allocation's consumedCapacity); 0 for whole devices.
	ConsumedMemory int64 `json:"consumedMemory,omitempty"`
	// AdminAccess is set when the allocation has admin access (a monitoring
	// agent may use a GPU that another claim holds).
	AdminAccess bool `json:"adminAccess,omitempty"`
	// CDIDeviceIDs are the fully qualified CDI device names handed to the
	// runtime for this device.
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	// Config is the effective GpuClaimParameters applied to the device. This
	// package treats it as opaque JSON.
	Config json.RawMessage `json:"config,omitempty"`
	// MIG is set when the device is a MIG device; UUID is then the MIG
	// device's UUID (empty until a dynamic one is created).
	MIG *MIG `json:"mig,omitempty"`
	// VFIO is set when the device is a GPU passed through to vfio-pci (the
	// vfio device type); UUID is then the GPU's.
	VFIO *VFIO `json:"vfio,omitempty"`
}

// VFIO is what unprepare and crash recovery need to give a passed-through
// GPU back to the nvidia driver, and what its CDI spec and metadata say.
type VFIO struct {
	// Parent is the device name of the GPU, e.g. "gpu-0".
	Parent string `json:"parent"`
	// PCIBusID is the GPU's sysfs address, e.g. "0000:1b:00.0".
	PCIBusID string `json:"pciBusID"`
	// IOMMUGroup is the GPU's IOMMU group: /dev/vfio/<IOMMUGroup> with the
	// legacy backend.
	IOMMUGroup int `json:"iommuGroup"`
	// IOMMUFD: the iommufd backend (the claim prefers it and the node
	// offers it): the container gets the GPU's cdev,
	// /dev/vfio/devices/vfio<N>, instead of its group's node.
	IOMMUFD bool `json:"iommufd,omitempty"`
	// APIDevice: the container also gets the backend's API device,
	// /dev/vfio/vfio (legacy) or /dev/iommu (iommufd).
	APIDevice bool `json:"apiDevice,omitempty"`
}

// MIG is what crash recovery needs to know about a MIG device: where it
// lives, and for dynamic MIG, which instance the plugin created.
type MIG struct {
	// Parent is the device name of the GPU, e.g. "gpu-0".
	Parent     string `json:"parent"`
	ParentUUID string `json:"parentUUID"`
	// Profile is the GPU instance profile, e.g. "1g.10gb"; ProfileID its
	// NVML ID.
	Profile   string `json:"profile"`
	ProfileID uint32 `json:"profileID"`
	// Start and Size are the placement in memory slices.
	Start int `json:"start"`
	Size  int `json:"size"`
	// GIID and CIID are the GPU and compute instance IDs.
	GIID int `json:"giID"`
	CIID int `json:"ciID"`
	// Dynamic is set when the plugin creates the device at prepare and
	// destroys it at unprepare.
	Dynamic bool `json:"dynamic,omitempty"`
}
