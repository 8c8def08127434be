package sharing

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// ErrUnenforceable marks a configuration that the plugin cannot honour on
// the allocated devices, e.g. an MPS limit above a consumable share.
var ErrUnenforceable = errors.New("sharing configuration cannot be honoured")

// MPSDaemon is one MPS control daemon of a claim, that of one
// configuration group: what PlanMPS decides (the devices it serves and its
// settings) and, once MPSControl.Start has run it, where it runs. The
// caller keeps it (internal/plugin/prepare records it in the claim's
// checkpoint record).
type MPSDaemon struct {
	// Group numbers the claim's daemons from 0. Group 0's directory and
	// Pod are named after the claim alone, as when a claim had one daemon.
	Group int
	// Devices are the UUIDs the daemon serves, in its device-ordinal order.
	Devices []string
	// ActiveThreadPercentage is the default for clients; 0 means unset.
	ActiveThreadPercentage int32
	// PinnedMemoryLimits are per device (same order as Devices), in bytes;
	// nil or 0 means no limit.
	PinnedMemoryLimits []int64
	// PID of the daemon process, in the PID namespace of the plugin
	// instance that started it (0 until started).
	PID int
	// Dir holds the daemon's pipe/ and log/ directories (set by Start).
	Dir string
}

// Device is one allocated device of a claim, as sharing sees it.
type Device struct {
	// Name in the ResourceSlice, for messages.
	Name string
	UUID string
	// Config is the device's effective, validated GpuClaimParameters.
	Config *v1alpha1.GpuClaimParameters
	// RequestUUIDs are the GPUs of the same request(s), in the order the
	// claim allocated them: device ordinals index it.
	RequestUUIDs []string
	// Share is set when the allocation is a consumable-capacity share.
	Share bool
	// ShareMemory is the memory the share consumed, in bytes (0 if the
	// allocation records none).
	ShareMemory int64
	// Memory is the device's own memory (a GPU's, or a MIG device's), in
	// bytes; 0 if unknown. No pinned-memory limit may exceed it.
	Memory int64
	// MIG is set for a MIG device. Its processes are time-sliced by its GPU
	// instance; the GPU-wide time slice (nvidia-smi compute-policy) is not
	// set for it, since other MIG devices of the GPU belong to other claims.
	MIG bool
}

// SetsTimeSlice tells whether the device's config asks for a GPU time
// slice that the plugin applies, and which.
func (d Device) SetsTimeSlice() (v1alpha1.TimeSliceInterval, bool) {
	if d.MIG {
		return "", false
	}
	return d.TimeSlice()
}

// Strategy returns the device's sharing strategy (Exclusive when unset).
func (d *Device) Strategy() v1alpha1.GpuSharingStrategy {
	if d.Config == nil || d.Config.Sharing == nil || d.Config.Sharing.Strategy == "" {
		return v1alpha1.ExclusiveStrategy
	}
	return d.Config.Sharing.Strategy
}

// usesMPS: MPS was asked for, or the device is a share that consumed
// memory, which is enforced through an MPS pinned-memory limit. A share
// that consumed none (--consumable-shares=unlimited or a count, no memory
// request) has nothing to limit and runs without a daemon of its own.
func (d *Device) usesMPS() bool {
	return d.Strategy() == v1alpha1.MPSStrategy || d.limitsShareMemory()
}

// limitsShareMemory: the device is a share whose consumed memory the
// plugin enforces.
func (d *Device) limitsShareMemory() bool { return d.Share && d.ShareMemory > 0 }

// TimeSlice returns the interval to apply, if the device is time-sliced.
func (d *Device) TimeSlice() (v1alpha1.TimeSliceInterval, bool) {
	if d.Strategy() != v1alpha1.TimeSlicingStrategy {
		return "", false
	}
	if d.Config.Sharing.TimeSlicing == nil {
		return v1alpha1.DefaultTimeSlice, true
	}
	return d.Config.Sharing.TimeSlicing.Interval, true
}

// Check refuses combinations that cannot be enforced: a time-sliced
// consumable share that consumed memory (its memory is limited through an
// MPS server of its own, whose clients MPS runs side by side rather than in
// time slices). A share that consumed no memory may be time-sliced; the
// GPU's one time slice must then agree with its other holders' (the
// prepare state machine checks that).
func Check(devs []Device) error {
	for _, d := range devs {
		if d.limitsShareMemory() && d.Strategy() == v1alpha1.TimeSlicingStrategy {
			return fmt.Errorf("%w: %s is a consumable share of %s (%s of memory), whose memory is enforced through MPS; "+
				"strategy TimeSlicing cannot limit it — use strategy MPS, leave sharing unset, or request no memory "+
				"(on a node with --consumable-shares=unlimited or a count)", ErrUnenforceable, d.Name, d.UUID, MiB(d.ShareMemory))
		}
	}
	return nil
}

// PlanMPS returns the MPS control daemons a claim needs for its devices
// (none if no device uses MPS): one per configuration group, as NVIDIA's
// driver runs one per configuration of a claim. Devices whose effective MPS
// settings are equal form one group, served by one daemon with the group's
// thread percentage and each device's pinned-memory limit; groups are in
// the order of their first device, and daemon i has Group i. It refuses
// settings that cannot be honoured, with a message that says what to
// change.
func PlanMPS(devs []Device) ([]*MPSDaemon, error) {
	if err := Check(devs); err != nil {
		return nil, err
	}
	var daemons []*MPSDaemon
	groups := map[string]*MPSDaemon{}
	for _, dev := range devs {
		if !dev.usesMPS() {
			continue
		}
		var cfg *v1alpha1.MpsConfig
		if dev.Strategy() == v1alpha1.MPSStrategy {
			cfg = dev.Config.Sharing.MPS
		}
		if cfg == nil {
			cfg = &v1alpha1.MpsConfig{}
		}
		key, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("MPS configuration of %s: %w", dev.Name, err)
		}
		d := groups[string(key)]
		if d == nil {
			d = &MPSDaemon{Group: len(daemons)}
			if p := cfg.DefaultActiveThreadPercentage; p != nil {
				d.ActiveThreadPercentage = *p
			}
			groups[string(key)] = d
			daemons = append(daemons, d)
		}
		limit, err := pinnedLimit(dev, cfg)
		if err != nil {
			return nil, err
		}
		d.Devices = append(d.Devices, dev.UUID)
		d.PinnedMemoryLimits = append(d.PinnedMemoryLimits, limit)
	}
	for _, d := range daemons {
		if !slices.ContainsFunc(d.PinnedMemoryLimits, func(l int64) bool { return l > 0 }) {
			d.PinnedMemoryLimits = nil
		}
	}
	return daemons, nil
}

// pinnedLimit is the device's limit in bytes (0: none): its per-device
// entry (by ordinal or UUID), else the default, else the share's memory on a
// share.
func pinnedLimit(dev Device, cfg *v1alpha1.MpsConfig) (int64, error) {
	ordinal := slices.Index(dev.RequestUUIDs, dev.UUID)
	entry := ""
	for _, key := range slices.Sorted(maps.Keys(cfg.PerDevicePinnedMemoryLimits)) {
		n, uuid, err := v1alpha1.ParseDeviceKey(key)
		switch {
		case err == nil && uuid != "" && !slices.Contains(dev.RequestUUIDs, uuid):
			return 0, fmt.Errorf("%w: perDevicePinnedMemoryLimits names device %q, which is not one of the request's devices (%s); "+
				"use one of their UUIDs or an ordinal", ErrUnenforceable, key, strings.Join(dev.RequestUUIDs, ", "))
		case err != nil || uuid == "" && n >= len(dev.RequestUUIDs):
			return 0, fmt.Errorf("%w: perDevicePinnedMemoryLimits names device %q, but the request has %d GPU(s) (ordinals 0 to %d)",
				ErrUnenforceable, key, len(dev.RequestUUIDs), len(dev.RequestUUIDs)-1)
		}
		if uuid != dev.UUID && (uuid != "" || n != ordinal) {
			continue
		}
		if entry != "" {
			return 0, fmt.Errorf("%w: perDevicePinnedMemoryLimits: both %q and %q name device %s; keep one",
				ErrUnenforceable, entry, key, dev.UUID)
		}
		entry = key
	}
	var q *resource.Quantity
	if entry != "" {
		perDevice := cfg.PerDevicePinnedMemoryLimits[entry]
		q = &perDevice
	} else if cfg.DefaultPinnedDeviceMemoryLimit != nil {
		q = cfg.DefaultPinnedDeviceMemoryLimit
	}
	var limit int64
	if q != nil {
		// Validation bounds limits far below this; the check keeps a
		// quantity that got past it from wrapping negative in Value()
		// and so silently becoming "no limit".
		if q.CmpInt64(math.MaxInt64) >= 0 || q.Sign() <= 0 {
			return 0, fmt.Errorf("%w: the MPS pinned-memory limit of %s (%s) is not a byte count the plugin can apply; "+
				"set a limit between 1Mi and the GPU's memory", ErrUnenforceable, dev.Name, q)
		}
		limit = q.Value()
	}
	if dev.Memory > 0 && limit > dev.Memory {
		return 0, fmt.Errorf("%w: the MPS pinned-memory limit of %s (%s) exceeds the memory of the device (%s); "+
			"lower the limit", ErrUnenforceable, dev.Name, MiB(limit), MiB(dev.Memory))
	}
	if !dev.Share || dev.ShareMemory == 0 {
		return limit, nil
	}
	if limit > dev.ShareMemory {
		return 0, fmt.Errorf("%w: the MPS pinned-memory limit of %s (%s) exceeds the memory of its consumable share of GPU %s (%s); "+
			"request more memory (capacity.requests.memory) or lower the limit", ErrUnenforceable, dev.Name, MiB(limit), dev.UUID, MiB(dev.ShareMemory))
	}
	if limit == 0 {
		limit = dev.ShareMemory
	}
	return limit, nil
}

// ContainerEdits returns what a container using device uuid (seeing
// visible, in that order) needs to reach its group's MPS daemon d: the pipe
// and log directories and the limits, as environment the CUDA client reads.
// It returns nothing if the daemon does not serve uuid.
func ContainerEdits(d *MPSDaemon, uuid string, visible []string) ([]string, []*cdispec.Mount) {
	if d == nil || !slices.Contains(d.Devices, uuid) {
		return nil, nil
	}
	env := []string{
		PipeDirEnv + "=" + ContainerPipeDir,
		"CUDA_MPS_LOG_DIRECTORY=" + ContainerLogDir,
	}
	if d.ActiveThreadPercentage > 0 {
		env = append(env, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", d.ActiveThreadPercentage))
	}
	var limits []string
	for ordinal, u := range visible {
		i := slices.Index(d.Devices, u)
		if i >= 0 && i < len(d.PinnedMemoryLimits) && d.PinnedMemoryLimits[i] > 0 {
			limits = append(limits, fmt.Sprintf("%d=%s", ordinal, MiB(d.PinnedMemoryLimits[i])))
		}
	}
	if len(limits) > 0 {
		env = append(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+strings.Join(limits, ","))
	}
	// The shm directory replaces the container's own /dev/shm: the MPS
	// server and its clients exchange memory through it.
	mounts := []*cdispec.Mount{
		{HostPath: d.Dir + "/" + pipeSubdir, ContainerPath: ContainerPipeDir, Type: "bind", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		{HostPath: d.Dir + "/" + logSubdir, ContainerPath: ContainerLogDir, Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		{HostPath: d.Dir + "/" + shmSubdir, ContainerPath: ContainerShmDir, Type: "bind", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
	}
	return env, mounts
}
