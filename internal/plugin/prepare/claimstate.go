package prepare

import (
	"fmt"
	"slices"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/claimconfig"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// claimState is a claim as the state machine works on it: its checkpoint
// record, and for each recorded device the device's decoded config.
// devices[i] is a view of rec.Devices[i] (it points into the record), so
// what a step learns about a device — a dynamic MIG device's UUID and
// instance IDs, its CDI device IDs — is in the record that is written next,
// with nothing to copy back. rec.Devices is never appended to once the state
// exists.
type claimState struct {
	rec     *checkpoint.ClaimRecord
	devices []device
}

// device is one device of a claim: its record entry and its effective,
// validated config (nil: none).
type device struct {
	*checkpoint.Device
	config *v1alpha1.GpuClaimParameters
}

func (d device) access() access { return accessOf(*d.Device) }

// newClaimState wraps rec; configs[i] is the config of rec.Devices[i]
// (missing ones are nil).
func newClaimState(rec *checkpoint.ClaimRecord, configs []*v1alpha1.GpuClaimParameters) *claimState {
	c := &claimState{rec: rec, devices: make([]device, len(rec.Devices))}
	for i := range rec.Devices {
		c.devices[i].Device = &rec.Devices[i]
		if i < len(configs) {
			c.devices[i].config = configs[i]
		}
	}
	return c
}

// stateOf is the state of a recorded claim: its configs decoded again.
func stateOf(rec *checkpoint.ClaimRecord) (*claimState, error) {
	configs := make([]*v1alpha1.GpuClaimParameters, len(rec.Devices))
	for i, d := range rec.Devices {
		cfg, err := v1alpha1.Decode(d.Config)
		if err != nil {
			return nil, fmt.Errorf("config of device %s in checkpoint: %w", d.Name, err)
		}
		configs[i] = cfg
	}
	return newClaimState(rec, configs), nil
}

// plan checks a claim's allocation against the node and builds the state
// of the claim to prepare: a PrepareStarted record (not yet written) with
// each device's effective config encoded for the checkpoint. A device listed
// twice (one device satisfying several requests is impossible today, but it
// must not be prepared twice) becomes one entry with all its requests.
func (m *Manager) plan(ref claimRef, configs []claimconfig.DeviceConfig) (*claimState, error) {
	rec := &checkpoint.ClaimRecord{UID: ref.uid, Namespace: ref.namespace, Name: ref.name, State: checkpoint.PrepareStarted}
	cfgs := make([]*v1alpha1.GpuClaimParameters, 0, len(configs))
	seen := map[string]int{}
	for _, c := range configs {
		d, err := m.planDevice(c)
		if err != nil {
			return nil, err
		}
		if i, ok := seen[d.Name]; ok {
			rec.Devices[i].Requests = append(rec.Devices[i].Requests, d.Requests...)
			continue
		}
		seen[d.Name] = len(rec.Devices)
		rec.Devices = append(rec.Devices, d)
		cfgs = append(cfgs, c.Config)
	}
	if err := m.planPartition(rec); err != nil {
		return nil, err
	}
	return newClaimState(rec, cfgs), nil
}

// claimRef names a claim.
type claimRef struct{ uid, namespace, name string }

// planDevice is the checkpoint entry of one allocated device.
func (m *Manager) planDevice(c claimconfig.DeviceConfig) (checkpoint.Device, error) {
	admin := c.Result.AdminAccess != nil && *c.Result.AdminAccess
	gpu, ok := m.gpus[c.Result.Device]
	uuid := ""
	var migRec *checkpoint.MIG
	var vfioRec *checkpoint.VFIO
	if v, isVFIO := m.vfios[c.Result.Device]; isVFIO {
		var err error
		if vfioRec, err = m.planVFIO(c, v); err != nil {
			return checkpoint.Device{}, err
		}
		uuid = v.UUID
	} else if ok && gpu.PublishesWhole() {
		uuid = gpu.UUID
	} else {
		var err error
		if migRec, uuid, err = m.migRecord(c.Result.Device, admin); err != nil {
			return checkpoint.Device{}, err
		}
	}
	raw, err := v1alpha1.Encode(c.Config)
	if err != nil {
		return checkpoint.Device{}, fmt.Errorf("encode config of device %s: %w", c.Result.Device, err)
	}
	d := checkpoint.Device{
		Pool:           c.Result.Pool,
		Name:           c.Result.Device,
		Requests:       []string{c.Result.Request},
		UUID:           uuid,
		Config:         raw,
		MIG:            migRec,
		VFIO:           vfioRec,
		AdminAccess:    admin,
		ConsumedMemory: consumedMemory(c),
	}
	if c.Result.ShareID != nil {
		d.ShareID = string(*c.Result.ShareID)
	}
	return d, nil
}

// names are the claim's device names, in record order.
func (c *claimState) names() []string { return recordDeviceNames(c.rec) }

// setCDIDeviceIDs records the CDI device each device was written as.
func (c *claimState) setCDIDeviceIDs(ids map[string]string) {
	for _, d := range c.devices {
		d.CDIDeviceIDs = []string{ids[d.Name]}
	}
}

// uuidsByRequest lists, per request, the UUIDs of its devices.
func (c *claimState) uuidsByRequest() map[string][]string {
	byRequest := map[string][]string{}
	for _, d := range c.devices {
		for _, r := range d.Requests {
			byRequest[r] = append(byRequest[r], d.UUID)
		}
	}
	return byRequest
}

// requestUUIDs are the GPUs of the same request(s) as d, in order: the
// device ordinals of a container that uses those requests.
func requestUUIDs(d device, byRequest map[string][]string) []string {
	var visible []string
	for _, r := range d.Requests {
		for _, u := range byRequest[r] {
			if !slices.Contains(visible, u) {
				visible = append(visible, u)
			}
		}
	}
	return visible
}

// sharingDevices describes the claim's devices to internal/plugin/sharing.
func (c *claimState) sharingDevices() []sharing.Device {
	byRequest := c.uuidsByRequest()
	out := make([]sharing.Device, 0, len(c.devices))
	for _, d := range c.devices {
		out = append(out, sharing.Device{
			Name: d.Name, UUID: d.UUID, Config: d.config,
			RequestUUIDs: requestUUIDs(d, byRequest),
			Share:        d.ShareID != "", ShareMemory: d.ConsumedMemory,
			MIG: d.MIG != nil,
		})
	}
	return out
}

// sameDevices reports whether a recorded claim has the planned devices.
func sameDevices(rec, planned *checkpoint.ClaimRecord) bool {
	if len(rec.Devices) != len(planned.Devices) {
		return false
	}
	for i, p := range planned.Devices {
		// A dynamic MIG device has no UUID before it is created.
		if rec.Devices[i].Name != p.Name || (p.UUID != "" && rec.Devices[i].UUID != p.UUID) {
			return false
		}
	}
	return true
}

func recordDeviceNames(rec *checkpoint.ClaimRecord) []string {
	names := make([]string, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		names = append(names, d.Name)
	}
	return names
}

func accessOf(d checkpoint.Device) access {
	switch {
	case d.AdminAccess:
		return admin
	case d.ShareID != "":
		return share
	default:
		return exclusive
	}
}
