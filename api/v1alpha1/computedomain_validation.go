package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxComputeDomainNodes bounds status.nodes: about as many entries as fit
// in the 1.5 MiB the API server stores per object. The bound also lets the
// CRD's per-node CEL rule pass the API server's cost estimate.
const MaxComputeDomainNodes = 8192

// MaxCliqueIDLength bounds status.nodes[].cliqueID. NVML's fabric
// information makes it a UUID and a 32-bit number, far shorter.
const MaxCliqueIDLength = 256

// SetComputeDomainDefaults fills in the unset fields of cd in place, as the
// CustomResourceDefinition's defaults do: allocation mode Single, status
// NotReady for the domain and for each node. numNodes needs no default (0).
// A nil cd or channel is left alone; validation reports a missing channel.
func SetComputeDomainDefaults(cd *ComputeDomain) {
	if cd == nil {
		return
	}
	if c := cd.Spec.Channel; c != nil && c.AllocationMode == "" {
		c.AllocationMode = SingleChannel
	}
	if cd.Status.Status == "" {
		cd.Status.Status = DomainNotReady
	}
	for i := range cd.Status.Nodes {
		if cd.Status.Nodes[i].Status == "" {
			cd.Status.Nodes[i].Status = DomainNotReady
		}
	}
}

// ValidateComputeDomain checks the spec and the status of a defaulted cd
// (not its apiVersion, kind or metadata) and returns every problem, with
// paths such as "spec.channel.allocationMode".
func ValidateComputeDomain(cd *ComputeDomain) field.ErrorList {
	if cd == nil {
		return field.ErrorList{field.Required(field.NewPath("spec"), "no ComputeDomain given")}
	}
	errs := ValidateComputeDomainSpec(&cd.Spec, field.NewPath("spec"))
	return append(errs, ValidateComputeDomainStatus(&cd.Status, field.NewPath("status"))...)
}

// ValidateComputeDomainSpec checks a defaulted spec.
func ValidateComputeDomainSpec(spec *ComputeDomainSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.NumNodes < 0 {
		errs = append(errs, field.Invalid(path.Child("numNodes"), spec.NumNodes,
			"must be 0 or more (the number of nodes the workload runs on; 0 leaves it open)"))
	}
	c := spec.Channel
	if c == nil {
		return append(errs, field.Required(path.Child("channel"),
			"set channel.resourceClaimTemplate.name: the ResourceClaimTemplate through which the workload's pods claim IMEX channels"))
	}
	cpath := path.Child("channel")
	namePath := cpath.Child("resourceClaimTemplate", "name")
	if c.ResourceClaimTemplate.Name == "" {
		errs = append(errs, field.Required(namePath,
			"the name of the ResourceClaimTemplate to create for the domain's channels, in the domain's namespace"))
	} else {
		errs = append(errs, validateDNSSubdomain(c.ResourceClaimTemplate.Name, namePath, "a ResourceClaimTemplate name")...)
	}
	switch c.AllocationMode {
	case SingleChannel, AllChannels:
	case "":
		errs = append(errs, field.Required(cpath.Child("allocationMode"),
			fmt.Sprintf("supported values: %s", quoteAll(SupportedAllocationModes))))
	default:
		errs = append(errs, field.NotSupported(cpath.Child("allocationMode"), c.AllocationMode, SupportedAllocationModes))
	}
	return errs
}

// ValidateComputeDomainStatus checks a defaulted status: the states, at most
// MaxComputeDomainNodes nodes, and for each node a node name, a canonical IP address, a clique ID of at most
// MaxCliqueIDLength bytes and an index of 0 or more; node names are unique,
// and so is each clique ID and index pair.
func ValidateComputeDomainStatus(s *ComputeDomainStatus, path *field.Path) field.ErrorList {
	errs := validateState(s.Status, path.Child("status"))
	if len(s.Nodes) > MaxComputeDomainNodes {
		errs = append(errs, field.TooMany(path.Child("nodes"), len(s.Nodes), MaxComputeDomainNodes))
	}
	names := map[string]int{}
	type slot struct {
		clique string
		index  int32
	}
	slots := map[slot]int{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		npath := path.Child("nodes").Index(i)
		if n.Name == "" {
			errs = append(errs, field.Required(npath.Child("name"), "the node's name"))
		} else {
			errs = append(errs, validateDNSSubdomain(n.Name, npath.Child("name"), "a node name")...)
			if first, ok := names[n.Name]; ok {
				errs = append(errs, duplicate(npath.Child("name"), n.Name, fmt.Sprintf("also nodes[%d]: a node is listed once", first)))
			} else {
				names[n.Name] = i
			}
		}
		if n.IPAddress == "" {
			errs = append(errs, field.Required(npath.Child("ipAddress"), "the address of the node's IMEX daemon"))
		} else {
			errs = append(errs, validation.IsValidIP(npath.Child("ipAddress"), n.IPAddress)...)
		}
		if len(n.CliqueID) > MaxCliqueIDLength {
			errs = append(errs, field.TooLong(npath.Child("cliqueID"), "", MaxCliqueIDLength))
		}
		if n.Index < 0 {
			errs = append(errs, field.Invalid(npath.Child("index"), n.Index, "must be 0 or more"))
		} else if first, ok := slots[slot{n.CliqueID, n.Index}]; ok {
			errs = append(errs, duplicate(npath.Child("index"), n.Index,
				fmt.Sprintf("also nodes[%d] in clique %q: each node of a clique has its own index", first, n.CliqueID)))
		} else {
			slots[slot{n.CliqueID, n.Index}] = i
		}
		errs = append(errs, validateState(n.Status, npath.Child("status"))...)
	}
	return errs
}

// ValidateComputeDomainUpdate checks that an update leaves the spec as it
// was: numNodes and channel are fixed when the domain is created (its
// channels and daemons are set up for them). Both objects are defaulted
// first, on copies, so that a default spelt out equals one left out.
func ValidateComputeDomainUpdate(newCD, oldCD *ComputeDomain) field.ErrorList {
	if newCD == nil || oldCD == nil {
		return nil
	}
	n, o := newCD.DeepCopy(), oldCD.DeepCopy()
	SetComputeDomainDefaults(n)
	SetComputeDomainDefaults(o)
	const how = "immutable: delete the ComputeDomain and create it again to change it"
	var errs field.ErrorList
	path := field.NewPath("spec")
	if n.Spec.NumNodes != o.Spec.NumNodes {
		errs = append(errs, field.Invalid(path.Child("numNodes"), n.Spec.NumNodes,
			fmt.Sprintf("%s (it was %d)", how, o.Spec.NumNodes)))
	}
	if !equality.Semantic.DeepEqual(n.Spec.Channel, o.Spec.Channel) {
		errs = append(errs, field.Invalid(path.Child("channel"), describeChannel(n.Spec.Channel),
			fmt.Sprintf("%s (it was %s)", how, describeChannel(o.Spec.Channel))))
	}
	return errs
}

// describeChannel renders a channel for an error message.
func describeChannel(c *ComputeDomainChannel) string {
	if c == nil {
		return "unset"
	}
	return fmt.Sprintf("resourceClaimTemplate.name=%q, allocationMode=%q", c.ResourceClaimTemplate.Name, c.AllocationMode)
}

func validateState(s ComputeDomainState, path *field.Path) field.ErrorList {
	switch s {
	case DomainReady, DomainNotReady:
		return nil
	case "":
		return field.ErrorList{field.Required(path, fmt.Sprintf("supported values: %s", quoteAll(SupportedStates)))}
	default:
		return field.ErrorList{field.NotSupported(path, s, SupportedStates)}
	}
}

// validateDNSSubdomain reports a value that is not a DNS-1123 subdomain
// (what Kubernetes requires of most object names), what naming the kind of
// name expected.
func validateDNSSubdomain(value string, path *field.Path, what string) field.ErrorList {
	msgs := validation.IsDNS1123Subdomain(value)
	if len(msgs) == 0 {
		return nil
	}
	shown := value
	if len(shown) > 80 {
		shown = shown[:80] + "..."
	}
	return field.ErrorList{field.Invalid(path, shown, what+" must be a DNS-1123 subdomain: "+strings.Join(msgs, "; "))}
}

// duplicate is field.Duplicate with an explanation.
func duplicate(path *field.Path, value any, detail string) *field.Error {
	e := field.Duplicate(path, value)
	e.Detail = detail
	return e
}
