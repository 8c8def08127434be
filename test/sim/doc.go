// Package sim simulates the NVML library of a GPU node, so that the plugin
// can run, and be tested, on machines without NVIDIA GPUs.
//
// A simulated node is described by a profile: a YAML file naming the GPUs
// of the node, their PCI addresses and NUMA nodes, and the driver version.
// GPU models come from a built-in catalogue (models/*.yaml) or are defined
// in the profile itself. Built-in profiles (profiles/*.yaml): dgx-a100,
// dgx-h100, gb200-nvl72-tray, gh200, h200, hgx-b200, l4 and mixed.
// profiles/README.md documents the format
// with a full example; in short:
//
//	name: my-node                  # optional when loaded from my-node.yaml
//	description: two H100 and an L4
//	driverVersion: "570.124.06"    # quote it
//	cudaDriverVersion: "12.8"      # reported by NVML as 12080
//	gpus:                          # one entry per group of identical GPUs
//	  - model: h100-sxm5-80gb      # a catalogue model or one from models:
//	    count: 2                   # default 1, or the number of devices
//	    numaNode: 0                # defaults for the group...
//	    devices:                   # ...and per-GPU overrides, in order
//	      - {pciBusID: "0000:1b:00.0", pcieRoot: pci0000:15, migEnabled: true,
//	         migDevices: [3g.40gb, 3g.40gb]}
//	      - {pciBusID: "0000:43:00.0", pcieRoot: pci0000:3d}
//	  - model: l4                  # no pciBusID: the lowest free bus is used
//	models: []                     # optional, same schema as the catalogue
//
// Decoding is strict: unknown fields, duplicate keys and values of the wrong
// type are errors, and every error names the field, such as
// `gpus[1].model: unknown model "h1000", known: ...`.
//
// # The simulated library
//
// NewServer turns a profile into a Server, an nvml.Interface built on the
// go-nvml mocks. GPUs are enumerated in PCI bus order. Their UUIDs are
// derived from (node name, profile name, GPU index) with uuid.NewSHA1, so a
// node keeps its UUIDs across restarts and two nodes never share them.
// Like real NVML, the Server must be initialized (Init) before use; Init and
// Shutdown are reference-counted. Library-level calls then answer
// ERROR_UNINITIALIZED; handles obtained earlier keep working (a
// simplification).
//
// Modelled calls: Init, InitWithFlags, Shutdown, ErrorString, Extensions
// (LookupSymbol), SystemGetDriverVersion, SystemGetNVMLVersion,
// SystemGetCudaDriverVersion(_v2), DeviceGetCount, DeviceGetHandleByIndex,
// DeviceGetHandleByUUID (GPU and MIG UUIDs), DeviceGetHandleByPciBusId (any
// of the forms "0000:1b:00.0", "00000000:1B:00.0", "1b:00.0"),
// DeviceGetHandleBySerial; and on a GPU: GetUUID, GetName, GetBrand,
// GetArchitecture, GetCudaComputeCapability, GetIndex, GetMinorNumber,
// GetSerial, GetBoardPartNumber, GetMemoryInfo(_v2), GetPciInfo (busId
// "00000000:1B:00.0", busIdLegacy "0000:1B:00.0"), GetPciInfoExt,
// GetNumaNodeId (NOT_SUPPORTED, as on x86 servers, unless the model's
// nvml: mapping says otherwise; the PCI device's node is PCINUMANode, what
// sysfs shows), Get/SetComputeMode, IsMigDeviceHandle, and the MIG calls
// below. Interface methods of the form DeviceXxx(device, ...) call the
// device's Xxx, as in the real library. Every other call answers
// nvml.ERROR_NOT_SUPPORTED (and zero values) instead of panicking.
//
// Exception: the handler-returning calls (GetGpuInstanceProfileInfoV,
// GetComputeInstanceProfileInfoV, GetGpuInstanceProfileInfoByIdV,
// GetTemperatureV, ...) return zero handlers whose V1/V2/V3 methods call the
// C library; do not use them on a simulated device. Use the non-V calls.
//
// # MIG
//
// For MIG-capable models the Server models: Get/SetMigMode (on Hopper and
// later a change takes effect at once; on Ampere it stays pending, with
// activationStatus ERROR_IN_USE, until the GPU is reset, see migcaps.go;
// disabling fails with ERROR_IN_USE while GPU instances exist), GetMaxMigDeviceCount, GetGpuInstanceProfileInfo (available in
// either MIG mode; IDs are the unique profile IDs real NVML reports, e.g. 19
// for 1g.10gb), GetGpuInstancePossiblePlacements (in memory slices, as NVML
// reports them), GetGpuInstanceRemainingCapacity, CreateGpuInstance (picks
// the highest free placement, as NVML does), CreateGpuInstanceWithPlacement,
// GetGpuInstances, GetGpuInstanceById, and on GPU instances GetInfo,
// Destroy (ERROR_IN_USE while compute instances exist),
// GetComputeInstanceProfileInfo, GetComputeInstancePossiblePlacements,
// GetComputeInstanceRemainingCapacity, CreateComputeInstance(WithPlacement),
// GetComputeInstances, GetComputeInstanceById; on compute instances GetInfo
// and Destroy. Overlapping placements, exceeding the compute slices or an
// instance limit (one "+me" instance) fail with ERROR_INSUFFICIENT_RESOURCES;
// a placement that is not in the profile's list fails with
// ERROR_INVALID_ARGUMENT. Creating instances needs MIG mode enabled
// (ERROR_NOT_SUPPORTED otherwise).
//
// GPU instance IDs follow NVML's placement tree (on 8 memory slices: 0 for
// the full GPU, 1-2 for halves, 3-6 for quarters, 7-14 for eighths).
// Compute instance profiles are derived from the GPU instance profile (see
// geometry.go). Each compute instance is a MIG device, listed by
// GetMigDeviceHandleByIndex in (GPU instance ID, compute instance ID) order,
// with UUID "MIG-<uuid>", GetIndex (that index, as NVML reports it),
// IsMigDeviceHandle, GetDeviceHandleFromMigDeviceHandle,
// GetGpuInstanceId, GetComputeInstanceId, GetName ("NVIDIA H100 80GB HBM3 MIG
// 3g.40gb"), GetMemoryInfo(_v2), GetAttributes, and the parent's brand,
// architecture, compute capability, PCI info and NUMA node. Handles of
// destroyed instances answer ERROR_INVALID_ARGUMENT.
//
// Server.PersistTo keeps the MIG state (MIG mode, GPU and compute
// instances, MIG UUIDs) in a file, so that a restarted process finds the MIG
// devices a real GPU would still have.
//
// # Platform capabilities
//
// capabilities.go: a model's optional nvml: mapping says where its NVML
// answers differ from a discrete GPU's in an x86 server: numaNodeId
// (gpu-memory on Grace), unifiedMemory (GetMemoryInfo NOT_SUPPORTED) and
// migProfileErrors (GetGpuInstanceProfileInfo or
// GetGpuInstancePossiblePlacements failing for chosen profiles). The
// simulator is never kinder than real NVML; docs/nvml-fidelity.md lists
// what each call answers, and TestFidelityDoc checks it.
//
// # NVLink
//
// A profile's nvlink list names the GPUs fully connected by NVLink (see
// nvlink.go); GetP2PStatus / DeviceGetP2PStatus answer from it. NVLink link
// state, counters and remote PCI info are not modelled.
//
// # NVLink fabric
//
// fabric.go: a model whose `nvml:` mapping says gpuFabric (the catalogue's
// gb200) answers GetGpuFabricInfo and, from driver R550 on, the versioned
// nvmlDeviceGetGpuFabricInfoV (struct v2; v3 from R580), through the
// FabricInfoV interface of its handle, from the GPU's fabric entry (cluster
// UUID, clique ID, state, status, health conditions). Every other GPU
// answers ERROR_NOT_SUPPORTED; before R550 the versioned call answers
// ERROR_FUNCTION_NOT_FOUND and LookupSymbol reports it missing.
//
// # Baseboard modules
//
// moduleid.go: a profile's moduleID per GPU is what GetModuleId answers
// (the 8-GPU boards dgx-a100, dgx-h100 and hgx-b200 number theirs 1..8);
// a GPU without one answers ERROR_NOT_SUPPORTED.
//
// # Fabric Manager
//
// fabricmanager.go: a profile's fabricManager (none, bare-metal,
// shared-nvswitch) says how the node runs NVSwitch Fabric Manager; in shared
// NVSwitch mode FabricPartitions is the HGX 8-GPU partition table by module
// ID. The simulated libnvfm (test/fmsim) answers Fabric Manager's API from it.
//
// # Faults
//
// faults.go models what a health monitor sees of a failing GPU: event sets
// (EventSetCreate, RegisterEvents, GetSupportedEventTypes, EventSetWait,
// EventSetFree) delivering critical XID and double-bit ECC events, the ECC
// counters (GetTotalEccErrors), the driver's recovery action (GetFieldValues
// with FI_DEV_GET_GPU_RECOVERY_ACTION; not supported when the profile's
// driverVersion is older than 550), and GPUs fallen off the bus. A lost GPU
// answers every call with ERROR_GPU_IS_LOST, as real NVML can: its identity
// (UUID, name, PCI info), memory, MIG calls and MIG devices, event
// registration, and every lookup of its handle (by index, UUID, PCI bus ID
// or serial); DeviceGetCount still counts it (lost.go). Faults are injected
// with InjectXID,
// InjectDoubleBitECC and SetLost and repaired with Reset, or through a
// FaultFile (faultfile.go), the control file the plugin watches in
// simulated mode.
//
// # Telemetry
//
// telemetry.go: a GPU or MIG device is busy while a process uses it
// (processes.go: one file per process in the directory SetProcessDir names,
// written by the fake container runtime). Modelled: GetUtilizationRates
// (NOT_SUPPORTED on a GPU in MIG mode and on MIG devices, as in NVML),
// GetMemoryInfo(_v2) used/free, GetPowerUsage, GetEnforcedPowerLimit,
// GetTemperature (GPU sensor), GetClockInfo and GetMaxClockInfo (SM and
// graphics clocks), GetCurrentClocksEventReasons and the deprecated
// ...ThrottleReasons; power and clocks need the model's figures
// (powerLimitWatts, idlePowerWatts, maxSMClockMHz, idleSMClockMHz), else
// they answer NOT_SUPPORTED. gpm.go: GPM (Hopper and newer), the per-MIG
// utilization. A "thermal" fault throttles a GPU.
//
// Not modelled: the processes' own NVML view (GetComputeRunningProcesses
// and per-process utilization), other clocks, fans, energy counters,
// violation counters, single-bit ECC events, vGPU, and MIG compute instance
// engine profiles other than the shared one.
//
// All Server methods are safe for concurrent use: one mutex guards the
// mutable state (MIG mode, compute mode, GPU and compute instances). The
// go-nvml mocks record every call (XxxCalls), so a long-running simulated
// plugin grows slowly with the number of NVML calls it makes.
package sim
