package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ComputeDomainKind is the kind of ComputeDomain objects.
	ComputeDomainKind = "ComputeDomain"
	// ComputeDomainListKind is the kind of a list of ComputeDomains.
	ComputeDomainListKind = "ComputeDomainList"
	// ComputeDomainResource is the plural resource name under which the
	// CustomResourceDefinition serves ComputeDomains.
	ComputeDomainResource = "computedomains"
)

// ComputeDomain asks for a set of nodes whose GPUs can share memory over
// NVLink across node boundaries (multi-node NVLink through IMEX, as on
// GB200 NVL72 racks). The workload's pods claim IMEX channels from the
// ResourceClaimTemplate the spec names; the nodes those pods land on form
// the domain.
//
// The spec cannot change once the object exists. The status is written by
// the controller and is meant for people and tools that look at the domain;
// a workload should not wait on it.
//
// The gpu-controller's ComputeDomain controller creates the channel
// template and the IMEX daemons' DaemonSet and writes the status; the node
// side (channel devices, the daemon) does not exist yet. See
// docs/computedomains.md.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ComputeDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says what the workload needs. Immutable.
	Spec ComputeDomainSpec `json:"spec"`
	// Status reports the nodes that joined and whether the domain is ready.
	Status ComputeDomainStatus `json:"status,omitempty"`
}

// ComputeDomainList is a list of ComputeDomains.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ComputeDomainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ComputeDomain `json:"items"`
}

// ComputeDomainSpec is the desired state of a ComputeDomain.
type ComputeDomainSpec struct {
	// NumNodes is how many nodes the workload is expected to occupy, 0 or
	// more. It only feeds the domain's overall status, which cannot be Ready
	// while fewer nodes than this have joined; it holds no pod back. 0 (the
	// default) leaves the number open: the domain is Ready once a node
	// joined and whenever every node that joined is.
	NumNodes int32 `json:"numNodes,omitempty"`

	// Channel describes the ResourceClaimTemplate through which the
	// workload's pods get IMEX channels. Required.
	Channel *ComputeDomainChannel `json:"channel"`
}

// ComputeDomainChannel describes how the workload's pods claim IMEX
// channels of the domain.
type ComputeDomainChannel struct {
	// ResourceClaimTemplate names the template to be created in the
	// domain's namespace; pods reference it in their resourceClaims.
	ResourceClaimTemplate ChannelClaimTemplate `json:"resourceClaimTemplate"`

	// AllocationMode is Single (the default: every claim made from the
	// template gets one channel) or All (every claim gets all the channels
	// of the IMEX domain).
	AllocationMode ChannelAllocationMode `json:"allocationMode,omitempty"`
}

// ChannelClaimTemplate identifies the ResourceClaimTemplate of a domain's
// channels.
type ChannelClaimTemplate struct {
	// Name is the template's name: a DNS-1123 subdomain, as every
	// ResourceClaimTemplate name must be.
	Name string `json:"name"`
}

// ChannelAllocationMode says how many IMEX channels one claim gets.
type ChannelAllocationMode string

const (
	// SingleChannel gives each claim one channel. This is the default.
	SingleChannel ChannelAllocationMode = "Single"
	// AllChannels gives each claim every channel of the IMEX domain.
	AllChannels ChannelAllocationMode = "All"
)

// SupportedAllocationModes lists the accepted channel allocation modes.
var SupportedAllocationModes = []ChannelAllocationMode{SingleChannel, AllChannels}

// ComputeDomainState is the readiness of a domain or of one of its nodes.
type ComputeDomainState string

const (
	// DomainReady: for a node, its IMEX daemon can broker memory exchanges;
	// for the domain, enough nodes joined and all of them are ready.
	DomainReady ComputeDomainState = "Ready"
	// DomainNotReady is the default: not (or no longer) ready.
	DomainNotReady ComputeDomainState = "NotReady"
)

// SupportedStates lists the accepted values of the status fields.
var SupportedStates = []ComputeDomainState{DomainReady, DomainNotReady}

// ComputeDomainStatus is the observed state of a ComputeDomain, written by
// the controller.
type ComputeDomainStatus struct {
	// Status is Ready or NotReady (the default).
	Status ComputeDomainState `json:"status,omitempty"`

	// Nodes lists the nodes that joined the domain, one entry per node name.
	// Within the list, a clique ID and index pair belongs to one node only.
	Nodes []ComputeDomainNode `json:"nodes,omitempty"`
}

// ComputeDomainNode is one node of a domain.
type ComputeDomainNode struct {
	// Name is the Kubernetes node's name.
	Name string `json:"name"`
	// IPAddress is the IPv4 or IPv6 address at which the IMEX daemons of
	// the other nodes reach this node's daemon.
	IPAddress string `json:"ipAddress"`
	// CliqueID identifies the NVLink partition the node's GPUs are in (what
	// NVML's fabric information reports: the fabric's cluster UUID and the
	// clique ID). Nodes of different cliques cannot share memory over
	// NVLink. Empty when the node's GPUs report no clique.
	CliqueID string `json:"cliqueID"`
	// Index is the node's position within its clique, 0 or more. It gives
	// the node's daemon a name its peers can rely on while its address
	// changes.
	Index int32 `json:"index"`
	// Status is Ready once the node's IMEX daemon is ready, NotReady (the
	// default) before and whenever it is not.
	Status ComputeDomainState `json:"status,omitempty"`
}
