package model

// UnavailableGPU is a GPU that NVML counts (it has an index) but that
// discovery could not describe: its handle, identity or facts could not be
// read. What could still be read is kept, to recognise it.
type UnavailableGPU struct {
	// Index is the NVML index.
	Index int `json:"index"`
	// UUID, when NVML still reported it; else empty.
	UUID string `json:"uuid,omitempty"`
	// PCIBusID, canonical form, when NVML still reported it; else empty.
	PCIBusID string `json:"pciBusID,omitempty"`
	// Reason is the value of the lost taint the GPU gets if it is
	// published: "gpu-is-lost", "reset-required" or "unreachable".
	Reason string `json:"reason"`
	// Error is what NVML answered, for people.
	Error string `json:"error"`
	// Err is the same error for errors.Is (not serialized).
	Err error `json:"-"`
	// PublishedAs is the device name under which the GPU is published from
	// its last known identity (tainted); empty when it is withheld.
	PublishedAs string `json:"publishedAs,omitempty"`
	// Withheld says why it is not published; empty when it is.
	Withheld string `json:"withheld,omitempty"`
}
