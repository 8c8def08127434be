package v1alpha1

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// domain returns a valid, defaulted ComputeDomain named cd with template
// "channels" and the given changes applied.
func domain(change ...func(*ComputeDomain)) *ComputeDomain {
	cd := &ComputeDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: ComputeDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: "cd", Namespace: "default"},
		Spec: ComputeDomainSpec{NumNodes: 2, Channel: &ComputeDomainChannel{
			ResourceClaimTemplate: ChannelClaimTemplate{Name: "channels"}, AllocationMode: SingleChannel}},
		Status: ComputeDomainStatus{Status: DomainNotReady},
	}
	for _, c := range change {
		c(cd)
	}
	return cd
}

func node(name, ip, clique string, index int32, state ComputeDomainState) ComputeDomainNode {
	return ComputeDomainNode{Name: name, IPAddress: ip, CliqueID: clique, Index: index, Status: state}
}

func TestSetComputeDomainDefaults(t *testing.T) {
	cd := &ComputeDomain{Spec: ComputeDomainSpec{Channel: &ComputeDomainChannel{ResourceClaimTemplate: ChannelClaimTemplate{Name: "c"}}},
		Status: ComputeDomainStatus{Nodes: []ComputeDomainNode{{Name: "a"}, {Name: "b", Status: DomainReady}}}}
	SetComputeDomainDefaults(cd)
	assert.Equal(t, SingleChannel, cd.Spec.Channel.AllocationMode)
	assert.Equal(t, int32(0), cd.Spec.NumNodes)
	assert.Equal(t, DomainNotReady, cd.Status.Status)
	assert.Equal(t, DomainNotReady, cd.Status.Nodes[0].Status)
	assert.Equal(t, DomainReady, cd.Status.Nodes[1].Status, "a set state is kept")

	all := domain(func(cd *ComputeDomain) { cd.Spec.Channel.AllocationMode = AllChannels })
	SetComputeDomainDefaults(all)
	assert.Equal(t, AllChannels, all.Spec.Channel.AllocationMode, "a set mode is kept")

	noChannel := &ComputeDomain{}
	SetComputeDomainDefaults(noChannel)
	assert.Nil(t, noChannel.Spec.Channel, "a missing channel is left for validation to report")
	SetComputeDomainDefaults(nil)
}

func TestValidateComputeDomain(t *testing.T) {
	long := strings.Repeat("a", 254)
	tests := []struct {
		name   string
		change func(*ComputeDomain)
		want   []string // exact messages; none: valid
	}{
		{name: "valid", change: func(*ComputeDomain) {}},
		{name: "all channels, open node count", change: func(cd *ComputeDomain) {
			cd.Spec.NumNodes, cd.Spec.Channel.AllocationMode = 0, AllChannels
		}},
		{name: "template name with dots", change: func(cd *ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = "imex.channels-0" }},
		{name: "negative numNodes", change: func(cd *ComputeDomain) { cd.Spec.NumNodes = -1 },
			want: []string{"spec.numNodes: Invalid value: -1: must be 0 or more (the number of nodes the workload runs on; 0 leaves it open)"}},
		{name: "no channel", change: func(cd *ComputeDomain) { cd.Spec.Channel = nil },
			want: []string{"spec.channel: Required value: set channel.resourceClaimTemplate.name: the ResourceClaimTemplate through which the workload's pods claim IMEX channels"}},
		{name: "no template name", change: func(cd *ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = "" },
			want: []string{"spec.channel.resourceClaimTemplate.name: Required value: the name of the ResourceClaimTemplate to create for the domain's channels, in the domain's namespace"}},
		{name: "template name with capitals", change: func(cd *ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = "My_Channels" },
			want: []string{`spec.channel.resourceClaimTemplate.name: Invalid value: "My_Channels": a ResourceClaimTemplate name must be a DNS-1123 subdomain: ` +
				`a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{name: "template name too long", change: func(cd *ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = long },
			want: []string{`spec.channel.resourceClaimTemplate.name: Invalid value: "` + long[:80] + `...": a ResourceClaimTemplate name must be a DNS-1123 subdomain: must be no more than 253 characters`}},
		{name: "unknown allocation mode", change: func(cd *ComputeDomain) { cd.Spec.Channel.AllocationMode = "single" },
			want: []string{`spec.channel.allocationMode: Unsupported value: "single": supported values: "Single", "All"`}},
		{name: "missing allocation mode", change: func(cd *ComputeDomain) { cd.Spec.Channel.AllocationMode = "" },
			want: []string{`spec.channel.allocationMode: Required value: supported values: "Single", "All"`}},
		{name: "every spec problem at once", change: func(cd *ComputeDomain) {
			cd.Spec.NumNodes, cd.Spec.Channel.ResourceClaimTemplate.Name, cd.Spec.Channel.AllocationMode = -3, "", "Many"
		}, want: []string{
			"spec.numNodes: Invalid value: -3: must be 0 or more (the number of nodes the workload runs on; 0 leaves it open)",
			"spec.channel.resourceClaimTemplate.name: Required value: the name of the ResourceClaimTemplate to create for the domain's channels, in the domain's namespace",
			`spec.channel.allocationMode: Unsupported value: "Many": supported values: "Single", "All"`,
		}},
		{name: "status with nodes", change: func(cd *ComputeDomain) {
			cd.Status = ComputeDomainStatus{Status: DomainReady, Nodes: []ComputeDomainNode{
				node("n1", "10.0.0.1", "c1.0", 0, DomainReady), node("n2", "2001:db8::2", "c1.0", 1, DomainReady),
				node("n3", "10.0.0.3", "c1.1", 0, DomainNotReady), node("n4", "10.0.0.4", "", 0, DomainNotReady)}}
		}},
		{name: "unknown domain state", change: func(cd *ComputeDomain) { cd.Status.Status = "Running" },
			want: []string{`status.status: Unsupported value: "Running": supported values: "Ready", "NotReady"`}},
		{name: "empty domain state", change: func(cd *ComputeDomain) { cd.Status.Status = "" },
			want: []string{`status.status: Required value: supported values: "Ready", "NotReady"`}},
		{name: "bad nodes", change: func(cd *ComputeDomain) {
			cd.Status.Nodes = []ComputeDomainNode{
				node("", "", strings.Repeat("c", 257), -1, "ready"),
				node("n1", "10.0.0.01", "c", 0, DomainReady),
				node("n1", "::ffff:10.0.0.2", "c", 0, DomainReady),
				node("N_3", "2001:db8:0::3", "c", 1, ""),
			}
		}, want: []string{
			"status.nodes[0].name: Required value: the node's name",
			"status.nodes[0].ipAddress: Required value: the address of the node's IMEX daemon",
			"status.nodes[0].cliqueID: Too long: may not be more than 256 bytes",
			"status.nodes[0].index: Invalid value: -1: must be 0 or more",
			`status.nodes[0].status: Unsupported value: "ready": supported values: "Ready", "NotReady"`,
			`status.nodes[1].ipAddress: Invalid value: "10.0.0.01": must not have leading 0s`,
			`status.nodes[2].name: Duplicate value: "n1": also nodes[1]: a node is listed once`,
			`status.nodes[2].ipAddress: Invalid value: "::ffff:10.0.0.2": must not be an IPv4-mapped IPv6 address`,
			`status.nodes[2].index: Duplicate value: 0: also nodes[1] in clique "c": each node of a clique has its own index`,
			`status.nodes[3].name: Invalid value: "N_3": a node name must be a DNS-1123 subdomain: ` +
				`a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			`status.nodes[3].ipAddress: Invalid value: "2001:db8:0::3": must be in canonical form ("2001:db8::3")`,
			`status.nodes[3].status: Required value: supported values: "Ready", "NotReady"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateComputeDomain(domain(tt.change))
			got := make([]string, len(errs))
			for i, e := range errs {
				got[i] = e.Error()
			}
			assert.Equal(t, tt.want, nilIfEmpty(got))
		})
	}
	assert.Equal(t, field.ErrorList{field.Required(field.NewPath("spec"), "no ComputeDomain given")}, ValidateComputeDomain(nil))
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestValidateComputeDomainUpdate(t *testing.T) {
	const how = "immutable: delete the ComputeDomain and create it again to change it"
	tests := []struct {
		name   string
		change func(*ComputeDomain)
		want   []string
	}{
		{name: "metadata and status may change", change: func(cd *ComputeDomain) {
			cd.Finalizers = []string{"resource.gpudra.io/computedomain"}
			cd.Status = ComputeDomainStatus{Status: DomainReady, Nodes: []ComputeDomainNode{node("n1", "10.0.0.1", "c", 0, DomainReady)}}
		}},
		{name: "spelling out the default mode is no change", change: func(cd *ComputeDomain) { cd.Spec.Channel.AllocationMode = "" }},
		{name: "numNodes", change: func(cd *ComputeDomain) { cd.Spec.NumNodes = 4 },
			want: []string{"spec.numNodes: Invalid value: 4: " + how + " (it was 2)"}},
		{name: "template", change: func(cd *ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = "other" },
			want: []string{`spec.channel: Invalid value: "resourceClaimTemplate.name=\"other\", allocationMode=\"Single\"": ` + how +
				` (it was resourceClaimTemplate.name="channels", allocationMode="Single")`}},
		{name: "allocation mode and numNodes", change: func(cd *ComputeDomain) {
			cd.Spec.NumNodes, cd.Spec.Channel.AllocationMode = 0, AllChannels
		}, want: []string{
			"spec.numNodes: Invalid value: 0: " + how + " (it was 2)",
			`spec.channel: Invalid value: "resourceClaimTemplate.name=\"channels\", allocationMode=\"All\"": ` + how +
				` (it was resourceClaimTemplate.name="channels", allocationMode="Single")`,
		}},
		{name: "channel removed", change: func(cd *ComputeDomain) { cd.Spec.Channel = nil },
			want: []string{`spec.channel: Invalid value: "unset": ` + how + ` (it was resourceClaimTemplate.name="channels", allocationMode="Single")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := domain()
			updated := domain(tt.change)
			errs := ValidateComputeDomainUpdate(updated, old)
			got := make([]string, len(errs))
			for i, e := range errs {
				got[i] = e.Error()
			}
			assert.Equal(t, tt.want, nilIfEmpty(got))
			assert.Equal(t, domain(), old, "the old object is not modified")
		})
	}
	assert.Nil(t, ValidateComputeDomainUpdate(nil, domain()))
}

func TestComputeDomainDeepCopy(t *testing.T) {
	orig := domain(func(cd *ComputeDomain) {
		cd.Status.Nodes = []ComputeDomainNode{node("n1", "10.0.0.1", "c", 0, DomainReady)}
	})
	c := orig.DeepCopy()
	require.Equal(t, orig, c)
	c.Spec.Channel.ResourceClaimTemplate.Name = "changed"
	c.Status.Nodes[0].Name = "changed"
	assert.Equal(t, "channels", orig.Spec.Channel.ResourceClaimTemplate.Name)
	assert.Equal(t, "n1", orig.Status.Nodes[0].Name)

	list := &ComputeDomainList{Items: []ComputeDomain{*orig}}
	lc, ok := list.DeepCopyObject().(*ComputeDomainList)
	require.True(t, ok)
	lc.Items[0].Spec.NumNodes = 9
	assert.Equal(t, int32(2), list.Items[0].Spec.NumNodes)

	var nilCD *ComputeDomain
	assert.Nil(t, nilCD.DeepCopy())
}
