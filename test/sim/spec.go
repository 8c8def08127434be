package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// This file holds the on-disk schema of profile and model files (the *Spec
// types) and the strict decoder that turns YAML into them. Validation and
// conversion into the exported types happen in validate.go.

// profileSpec is the top level of a profile file.
type profileSpec struct {
	Name              string         `json:"name"`
	Description       string         `json:"description"`
	DriverVersion     string         `json:"driverVersion"`
	CUDADriverVersion scalar         `json:"cudaDriverVersion"`
	GPUs              []gpuGroupSpec `json:"gpus"`
	Models            []modelSpec    `json:"models"`
	NVLink            []nvlinkSpec   `json:"nvlink"`
	// NUMANodesPerSocket is the node's sub-NUMA clustering (SNC): how many
	// NUMA nodes each CPU socket is split into (default 1).
	NUMANodesPerSocket int `json:"numaNodesPerSocket"`
	// FabricManager is how the node runs NVSwitch Fabric Manager
	// (fabricmanager.go).
	FabricManager string `json:"fabricManager"`
	// IOMMUFD: the node's kernel offers iommufd (/dev/iommu, and a VFIO
	// cdev per device bound to vfio-pci); default false.
	IOMMUFD bool `json:"iommufd"`
}

// deviceSpec holds the per-GPU settings. In a gpus[] entry they apply to all
// GPUs of the entry; in gpus[].devices[] they override them for one GPU.
type deviceSpec struct {
	PCIBusID   string   `json:"pciBusID"`
	NUMANode   *int     `json:"numaNode"`
	PCIeRoot   string   `json:"pcieRoot"`
	MIGEnabled *bool    `json:"migEnabled"`
	MIGDevices []string `json:"migDevices"`
	// ECCEnabled overrides the model's ECC mode (an administrator ran
	// nvidia-smi -e); only for a model with ECC.
	ECCEnabled *bool `json:"eccEnabled"`
	// Fabric is the GPU's NVLink fabric registration (fabric.go); only for
	// a model with nvml.gpuFabric. A device's entry overrides the group's
	// field by field.
	Fabric *fabricSpec `json:"fabric"`
	// ModuleID is the GPU's module (slot) number on an HGX/DGX baseboard,
	// what nvmlDeviceGetModuleId answers (moduleid.go); absent: the GPU
	// answers NOT_SUPPORTED.
	ModuleID *int `json:"moduleID"`
}

// gpuGroupSpec is one entry of gpus: Count GPUs of one model.
type gpuGroupSpec struct {
	Model string `json:"model"`
	Count *int   `json:"count"`
	deviceSpec
	Devices []deviceSpec `json:"devices"`
}

// modelSpec describes a GPU model, in the built-in catalogue (models/*.yaml)
// or in the models list of a profile.
type modelSpec struct {
	Name              string   `json:"name"`
	ProductName       string   `json:"productName"`
	Brand             string   `json:"brand"`
	Architecture      string   `json:"architecture"`
	ComputeCapability scalar   `json:"computeCapability"`
	Memory            scalar   `json:"memory"`
	Multiprocessors   int      `json:"multiprocessors"`
	PCIDeviceID       scalar   `json:"pciDeviceID"`
	PCISubsystemID    scalar   `json:"pciSubsystemID"`
	BoardPartNumber   string   `json:"boardPartNumber"`
	MIGCapable        bool     `json:"migCapable"`
	MIG               *migSpec `json:"mig"`
	// ECCEnabled is the ECC mode the GPU ships with; absent: the model has
	// no ECC (NVML answers NOT_SUPPORTED).
	ECCEnabled *bool `json:"eccEnabled"`
	// The telemetry the simulator reports under load (telemetry.go); a
	// model without them answers power and clock queries NOT_SUPPORTED.
	PowerLimitWatts int `json:"powerLimitWatts"`
	IdlePowerWatts  int `json:"idlePowerWatts"`
	MaxSMClockMHz   int `json:"maxSMClockMHz"`
	IdleSMClockMHz  int `json:"idleSMClockMHz"`
	// NVML is where the model's NVML answers differ from a discrete x86
	// GPU's (capabilities.go).
	NVML *nvmlSpec `json:"nvml"`
}

// migSpec is the MIG geometry of a model.
type migSpec struct {
	MemorySlices            int                   `json:"memorySlices"`
	MaxDevices              int                   `json:"maxDevices"`
	MultiprocessorsPerSlice int                   `json:"multiprocessorsPerSlice"`
	GPUInstanceProfiles     []gpuInstanceProfSpec `json:"gpuInstanceProfiles"`
}

// gpuInstanceProfSpec is one row of `nvidia-smi mig -lgip` plus its placements.
type gpuInstanceProfSpec struct {
	Name            string `json:"name"`
	NVMLProfile     scalar `json:"nvmlProfile"`
	ID              *int   `json:"id"`
	Slices          int    `json:"slices"`
	Memory          scalar `json:"memory"`
	Multiprocessors int    `json:"multiprocessors"`
	CopyEngines     int    `json:"copyEngines"`
	Decoders        int    `json:"decoders"`
	Encoders        int    `json:"encoders"`
	JPEGs           int    `json:"jpegs"`
	OFAs            int    `json:"ofas"`
	P2P             bool   `json:"p2p"`
	Instances       int    `json:"instances"`
	PlacementSize   int    `json:"placementSize"`
	Placements      []int  `json:"placements"`
}

// scalar is a YAML value that may be written as a string or as a number
// ("9.0" or 9.0, "0x233010DE" or 0x233010DE). It keeps the text; the
// validation step interprets it and reports errors with the field path.
type scalar string

func (s *scalar) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		*s = scalar(str)
	case string(b) == "null":
	default:
		*s = scalar(b)
	}
	return nil
}

var scalarType = reflect.TypeOf(scalar(""))

// decodeStrict converts YAML to the given spec type. Duplicate keys, unknown
// fields and values of the wrong type are reported with their field path,
// e.g. `gpus[1].devices[0].numaNode: expected an integer, got "zero"`.
func decodeStrict(data []byte, out any) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	if generic == nil {
		return fmt.Errorf("the document is empty")
	}
	if err := checkShape("", generic, reflect.TypeOf(out).Elem()); err != nil {
		return err
	}
	if err := json.Unmarshal(js, out); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// checkShape walks a generic JSON value along the Go type it will be decoded
// into and reports the first unknown field or type mismatch.
func checkShape(path string, v any, t reflect.Type) error {
	if v == nil {
		return nil // null: leaves the zero value
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	where := path
	if where == "" {
		where = "document"
	}
	switch {
	case t == scalarType:
		switch v.(type) {
		case string, float64:
			return nil
		}
		return fmt.Errorf("%s: expected a string or a number, got %s", where, describe(v))
	case t.Kind() == reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: expected a string, got %s (quote the value)", where, describe(v))
		}
	case t.Kind() == reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: expected true or false, got %s", where, describe(v))
		}
	case t.Kind() == reflect.Int:
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%s: expected an integer, got %s", where, describe(v))
		}
	case t.Kind() == reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: expected a list, got %s", where, describe(v))
		}
		for i, item := range list {
			if err := checkShape(fmt.Sprintf("%s[%d]", path, i), item, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: expected a mapping, got %s", where, describe(v))
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			if !ok {
				return fmt.Errorf("%s: unknown field (known fields: %s)", sub, strings.Join(sortedKeys(fields), ", "))
			}
			if err := checkShape(sub, obj[k], ft); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: internal error: unsupported schema type %s", where, t)
	}
	return nil
}

// jsonFields maps JSON names to field types, including promoted fields of
// embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" {
			for k, v := range jsonFields(f.Type) {
				fields[k] = v
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	return fields
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%v", v)
}
