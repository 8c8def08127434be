package compat

import "github.com/gpudra/gpudra/api/v1alpha1"

// ComputeDomainNames are the names under which ComputeDomains are served
// beside the GPU driver: the DRA driver of the IMEX channel and daemon
// devices, its two DeviceClasses, the node label that puts a node into a
// domain, and the opaque configuration the controller writes into the
// templates it creates. The controller, the chart and (once it exists) the
// node side take them from here and nowhere else.
type ComputeDomainNames struct {
	// Driver is the DRA driver of the channel and daemon devices.
	Driver string
	// ChannelClass is the DeviceClass of IMEX channels, which workload
	// claims (the domain's ResourceClaimTemplate) request.
	ChannelClass string
	// DaemonClass is the DeviceClass the IMEX daemon's own claim requests.
	DaemonClass string
	// Label is the label key whose value is a domain's UID: on a node while
	// the node belongs to the domain (the daemons' node selector), and on
	// every object the controller creates for the domain.
	Label string
	// ConfigAPIVersion, ChannelConfigKind and DaemonConfigKind are the
	// apiVersion and kinds of the opaque parameters of Driver that name the
	// domain in a channel or daemon claim.
	ConfigAPIVersion, ChannelConfigKind, DaemonConfigKind string
}

// ComputeDomain returns the ComputeDomain names of the mode: NVIDIA's
// (compute-domain.nvidia.com, compute-domain-default-channel.nvidia.com,
// compute-domain-daemon.nvidia.com, resource.nvidia.com/computeDomain) in
// the NVIDIA mode, their gpudra counterparts natively. They do not follow a
// native --driver-name: the channel driver is a driver of its own.
func (n Names) ComputeDomain() ComputeDomainNames {
	if n.Mode == NVIDIA {
		return ComputeDomainNames{
			Driver: "compute-domain.nvidia.com", ChannelClass: "compute-domain-default-channel.nvidia.com",
			DaemonClass: "compute-domain-daemon.nvidia.com", Label: NVIDIAComputeDomains.Group + "/computeDomain",
			ConfigAPIVersion: NVIDIAComputeDomains.String(), ChannelConfigKind: "ComputeDomainChannelConfig",
			DaemonConfigKind: "ComputeDomainDaemonConfig",
		}
	}
	return ComputeDomainNames{
		Driver: "compute-domain.gpudra.io", ChannelClass: "compute-domain-default-channel.gpudra.io",
		DaemonClass: "compute-domain-daemon.gpudra.io", Label: v1alpha1.GroupName + "/computeDomain",
		ConfigAPIVersion: v1alpha1.APIVersion, ChannelConfigKind: "ComputeDomainChannelConfig",
		DaemonConfigKind: "ComputeDomainDaemonConfig",
	}
}
