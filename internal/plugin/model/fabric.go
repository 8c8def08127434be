package model

import "strconv"

// FabricState is a GPU's registration with the NVLink fabric manager, as
// NVML reports it (NVML_GPU_FABRIC_STATE_*).
type FabricState string

// The fabric states; a state NVML adds later reads "state-<n>".
const (
	FabricNotSupported FabricState = "not-supported"
	FabricNotStarted   FabricState = "not-started"
	FabricInProgress   FabricState = "in-progress"
	FabricCompleted    FabricState = "completed"
)

// Conditions of NVML's fabric health mask (Fabric.Health).
const (
	FabricDegradedBandwidth     = "degraded-bandwidth"
	FabricRouteRecovery         = "route-recovery"
	FabricRouteUnhealthy        = "route-unhealthy"
	FabricAccessTimeoutRecovery = "access-timeout-recovery"
)

// Fabric is what NVML reports of a GPU's place in a multi-node NVLink
// fabric such as a GB200 NVL72 rack (nvmlDeviceGetGpuFabricInfo(V)): the
// fabric manager registers the GPU and assigns it the fabric's cluster UUID
// and a clique, the GPUs that can reach each other's memory over NVLink
// (and so share an IMEX domain).
type Fabric struct {
	// State of the registration.
	State FabricState `json:"state"`
	// ClusterUUID of the fabric, lower case; empty until the registration
	// completed, and on single-node NVLink systems (NVML's zero UUID).
	ClusterUUID string `json:"clusterUUID,omitempty"`
	// CliqueID is the GPU's clique in the cluster; meaningful only with a
	// ClusterUUID.
	CliqueID uint32 `json:"cliqueID"`
	// Error is the registration's failure (NVML's status, read only once
	// the state is completed); empty when it succeeded.
	Error string `json:"error,omitempty"`
	// Health holds the conditions of NVML's health mask that the driver
	// reports, true when the condition holds (FabricDegradedBandwidth, ...);
	// nil when the mask could not be read (drivers before R550 lack the
	// versioned call).
	Health map[string]bool `json:"health,omitempty"`
}

// Attached reports whether the GPU is a member of a multi-node NVLink
// fabric: registration completed without error, in a cluster of its own
// (non-zero UUID). NVIDIA's drivers apply the same test.
func (f *Fabric) Attached() bool {
	return f != nil && f.State == FabricCompleted && f.Error == "" && f.ClusterUUID != ""
}

// Clique names the GPU's clique as NVIDIA's drivers do,
// "<cluster UUID>.<clique ID>", for an attached GPU; empty otherwise.
func (f *Fabric) Clique() string {
	if !f.Attached() {
		return ""
	}
	return f.ClusterUUID + "." + strconv.FormatUint(uint64(f.CliqueID), 10)
}
