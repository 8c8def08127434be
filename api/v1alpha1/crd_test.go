package v1alpha1

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/gpudra/gpudra/test/crdschema"
)

// crdFile is the chart's ComputeDomain CRD; the chart renders it for both
// groups (see the file's header).
const crdFile = "../../deployments/helm/gpudra/files/computedomains-crd.yaml"

func loadCRDSchema(t *testing.T) *crdschema.Schema {
	t.Helper()
	crd, err := crdschema.Load(crdFile)
	require.NoError(t, err)
	assert.Equal(t, GroupName, crd.Spec.Group)
	assert.Equal(t, ComputeDomainResource+"."+GroupName, crd.Name)
	assert.Equal(t, ComputeDomainKind, crd.Spec.Names.Kind)
	assert.Equal(t, ComputeDomainListKind, crd.Spec.Names.ListKind)
	require.Len(t, crd.Spec.Versions, 1)
	s, err := crdschema.SchemaOf(crd, Version)
	require.NoError(t, err)
	return s
}

// TestComputeDomainCRD: the API server would accept the CRD, and its schema
// has the fields, types and enums of the Go types.
func TestComputeDomainCRD(t *testing.T) {
	s := loadCRDSchema(t)
	assert.Empty(t, s.CompareFields(reflect.TypeFor[ComputeDomain]()), "fields of the CRD's schema and of v1alpha1.ComputeDomain")
	for path, want := range map[string][]string{
		"spec.channel.allocationMode": {string(SingleChannel), string(AllChannels)},
		"status.status":               {string(DomainReady), string(DomainNotReady)},
		"status.nodes[].status":       {string(DomainReady), string(DomainNotReady)},
	} {
		got, err := s.Enum(path)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, got, path)
	}
	ml, err := s.Property("status.nodes[].cliqueID")
	require.NoError(t, err)
	require.NotNil(t, ml.MaxLength)
	assert.Equal(t, int64(MaxCliqueIDLength), *ml.MaxLength)
	nodes, err := s.Property("status.nodes")
	require.NoError(t, err)
	require.NotNil(t, nodes.MaxItems)
	assert.Equal(t, int64(MaxComputeDomainNodes), *nodes.MaxItems)
}

// manyNodes is a status with count valid nodes.
func manyNodes(count int) string {
	nodes := make([]string, count)
	for i := range nodes {
		nodes[i] = fmt.Sprintf(`{"name":"n%d","ipAddress":"10.%d.%d.%d","cliqueID":"c","index":%d}`, i, i>>16, (i>>8)&255, i&255, i)
	}
	return nodesJSON(nodes...)
}

// admit runs a JSON object through the CRD's schema as the API server
// would; it returns the defaulted object and the problems found.
func admit(t *testing.T, s *crdschema.Schema, obj, old string) (map[string]any, []string) {
	t.Helper()
	var o, prev map[string]any
	require.NoError(t, utiljson.Unmarshal([]byte(obj), &o))
	if old != "" {
		require.NoError(t, utiljson.Unmarshal([]byte(old), &prev))
		s.Admit(prev, nil) // stored objects are defaulted
	}
	var msgs []string
	for _, e := range s.Admit(o, prev) {
		msgs = append(msgs, e.Error())
	}
	return o, msgs
}

func cdJSON(spec, status string) string {
	s := `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomain","metadata":{"name":"cd","namespace":"default"}`
	if spec != "" {
		s += `,"spec":` + spec
	}
	if status != "" {
		s += `,"status":` + status
	}
	return s + "}"
}

const goodSpec = `{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"}}}`

func nodesJSON(nodes ...string) string {
	return `{"status":"Ready","nodes":[` + strings.Join(nodes, ",") + `]}`
}

// TestComputeDomainCRDAgreesWithGo runs objects through the CRD's schema and
// through DecodeComputeDomain: both must accept or both refuse each one.
func TestComputeDomainCRDAgreesWithGo(t *testing.T) {
	s := loadCRDSchema(t)
	tmpl := func(name string) string { return `{"channel":{"resourceClaimTemplate":{"name":"` + name + `"}}}` }
	n := func(name, ip, clique, rest string) string {
		return `{"name":"` + name + `","ipAddress":"` + ip + `","cliqueID":"` + clique + `"` + rest + `}`
	}
	tests := []struct {
		name string
		obj  string
		ok   bool
	}{
		{"minimal", cdJSON(tmpl("channels"), ""), true},
		{"every spec field", cdJSON(`{"numNodes":18,"channel":{"resourceClaimTemplate":{"name":"a.b-c"},"allocationMode":"All"}}`, ""), true},
		{"status with nodes", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c.1", `,"index":0,"status":"Ready"`),
			n("n2", "2001:db8::2", "c.1", `,"index":1`), n("n3", "10.0.0.3", "", ""))), true},
		{"largest numNodes", cdJSON(`{"numNodes":2147483647,"channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), true},
		{"most nodes", cdJSON(goodSpec, manyNodes(MaxComputeDomainNodes)), true},
		{"too many nodes", cdJSON(goodSpec, manyNodes(MaxComputeDomainNodes+1)), false},

		{"no spec", cdJSON("", ""), false},
		{"no channel", cdJSON(`{"numNodes":1}`, ""), false},
		{"no template", cdJSON(`{"channel":{}}`, ""), false},
		{"no template name", cdJSON(`{"channel":{"resourceClaimTemplate":{}}}`, ""), false},
		{"empty template name", cdJSON(tmpl(""), ""), false},
		{"template name with capitals", cdJSON(tmpl("Channels"), ""), false},
		{"template name with an underscore", cdJSON(tmpl("my_channels"), ""), false},
		{"template name ending in a dash", cdJSON(tmpl("channels-"), ""), false},
		{"template name of 254 characters", cdJSON(tmpl(strings.Repeat("a", 254)), ""), false},
		{"negative numNodes", cdJSON(`{"numNodes":-1,"channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), false},
		{"numNodes beyond int32", cdJSON(`{"numNodes":2147483648,"channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), false},
		{"numNodes as a string", cdJSON(`{"numNodes":"2","channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), false},
		{"numNodes as a fraction", cdJSON(`{"numNodes":1.5,"channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), false},
		{"lowercase allocation mode", cdJSON(`{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":"single"}}`, ""), false},
		{"unknown spec field", cdJSON(`{"numnodes":1,"channel":{"resourceClaimTemplate":{"name":"c"}}}`, ""), false},
		{"unknown channel field", cdJSON(`{"channel":{"resourceClaimTemplate":{"name":"c","namespace":"x"}}}`, ""), false},
		{"unknown top-level field", strings.Replace(cdJSON(goodSpec, ""), `"kind"`, `"extra":1,"kind"`, 1), false},

		{"unknown domain state", cdJSON(goodSpec, `{"status":"Pending"}`), false},
		{"node without an address", cdJSON(goodSpec, nodesJSON(`{"name":"n1","cliqueID":"c"}`)), false},
		{"node without a clique ID", cdJSON(goodSpec, nodesJSON(`{"name":"n1","ipAddress":"10.0.0.1"}`)), true},
		{"node without a name", cdJSON(goodSpec, nodesJSON(`{"ipAddress":"10.0.0.1","cliqueID":"c"}`)), false},
		{"node name with capitals", cdJSON(goodSpec, nodesJSON(n("Node1", "10.0.0.1", "c", ""))), false},
		{"two entries for one node", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c", ""), n("n1", "10.0.0.2", "c", `,"index":1`))), false},
		{"address with leading zeros", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.01", "c", ""))), false},
		{"IPv4-mapped IPv6 address", cdJSON(goodSpec, nodesJSON(n("n1", "::ffff:10.0.0.1", "c", ""))), false},
		{"IPv6 address not in canonical form", cdJSON(goodSpec, nodesJSON(n("n1", "2001:DB8::1", "c", ""))), false},
		{"host name for an address", cdJSON(goodSpec, nodesJSON(n("n1", "node1.example.com", "c", ""))), false},
		{"address with a zone", cdJSON(goodSpec, nodesJSON(n("n1", "fe80::1%eth0", "c", ""))), false},
		{"negative index", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c", `,"index":-1`))), false},
		{"clique ID of 257 bytes", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", strings.Repeat("c", 257), ""))), false},
		{"unknown node state", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c", `,"status":"Joining"`))), false},
		{"unknown node field", cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c", `,"hostname":"x"`))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, schemaErrs := admit(t, s, tt.obj, "")
			_, goErr := DecodeComputeDomain([]byte(tt.obj))
			assert.Equal(t, tt.ok, len(schemaErrs) == 0, "CRD schema: %v", schemaErrs)
			assert.Equal(t, tt.ok, goErr == nil, "DecodeComputeDomain: %v", goErr)
		})
	}

	// Where the two differ, on purpose:
	t.Run("an explicit empty allocation mode or state", func(t *testing.T) {
		// Go cannot tell "" from a field left out and defaults it; the API
		// server defaults only fields left out and refuses "".
		obj := cdJSON(`{"channel":{"resourceClaimTemplate":{"name":"c"},"allocationMode":""}}`, `{"status":""}`)
		_, schemaErrs := admit(t, s, obj, "")
		assert.Len(t, schemaErrs, 2, "%v", schemaErrs)
		_, err := DecodeComputeDomain([]byte(obj))
		assert.NoError(t, err)
	})
	t.Run("two nodes at one index of one clique", func(t *testing.T) {
		// A rule over pairs of list entries is beyond what a CRD's CEL
		// budget allows for an unbounded list; the Go code checks it.
		obj := cdJSON(goodSpec, nodesJSON(n("n1", "10.0.0.1", "c", ""), n("n2", "10.0.0.2", "c", "")))
		_, schemaErrs := admit(t, s, obj, "")
		assert.Empty(t, schemaErrs)
		_, err := DecodeComputeDomain([]byte(obj))
		assert.ErrorContains(t, err, `status.nodes[1].index: Duplicate value: 0`)
	})
}

// TestComputeDomainCRDDefaultsAgree: the CRD's defaults fill in what
// SetComputeDomainDefaults fills in.
func TestComputeDomainCRDDefaultsAgree(t *testing.T) {
	s := loadCRDSchema(t)
	obj := cdJSON(`{"channel":{"resourceClaimTemplate":{"name":"c"}}}`, `{"nodes":[{"name":"n1","ipAddress":"10.0.0.1","cliqueID":"c"}]}`)
	defaulted, errs := admit(t, s, obj, "")
	require.Empty(t, errs)
	data, err := json.Marshal(defaulted)
	require.NoError(t, err)
	byCRD := &ComputeDomain{} // as the API server stores it, without Go's defaults
	require.NoError(t, json.Unmarshal(data, byCRD))
	byGo, err := DecodeComputeDomain([]byte(obj))
	require.NoError(t, err)
	assert.Equal(t, byGo, byCRD)
}

// TestComputeDomainCRDUpdates: the CRD's transition rule and
// ValidateComputeDomainUpdate refuse the same spec changes.
func TestComputeDomainCRDUpdates(t *testing.T) {
	s := loadCRDSchema(t)
	old := cdJSON(goodSpec, "")
	tests := []struct {
		name string
		obj  string
		ok   bool
	}{
		{"unchanged", old, true},
		{"labels and status", strings.Replace(cdJSON(goodSpec, nodesJSON(`{"name":"n1","ipAddress":"10.0.0.1","cliqueID":"c"}`)),
			`"namespace":"default"`, `"namespace":"default","labels":{"a":"b"}`, 1), true},
		{"the default spelt out", cdJSON(`{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"},"allocationMode":"Single"}}`, ""), true},
		{"numNodes", cdJSON(`{"numNodes":3,"channel":{"resourceClaimTemplate":{"name":"channels"}}}`, ""), false},
		{"numNodes to its default", cdJSON(`{"channel":{"resourceClaimTemplate":{"name":"channels"}}}`, ""), false},
		{"template", cdJSON(`{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"other"}}}`, ""), false},
		{"allocation mode", cdJSON(`{"numNodes":2,"channel":{"resourceClaimTemplate":{"name":"channels"},"allocationMode":"All"}}`, ""), false},
	}
	oldCD, err := DecodeComputeDomain([]byte(old))
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, schemaErrs := admit(t, s, tt.obj, old)
			newCD, err := DecodeComputeDomain([]byte(tt.obj))
			require.NoError(t, err)
			goErrs := ValidateComputeDomainUpdate(newCD, oldCD)
			assert.Equal(t, tt.ok, len(schemaErrs) == 0, "CRD schema: %v", schemaErrs)
			assert.Equal(t, tt.ok, len(goErrs) == 0, "ValidateComputeDomainUpdate: %v", goErrs)
			if !tt.ok {
				assert.Contains(t, strings.Join(schemaErrs, "; "), "spec is immutable")
			}
		})
	}
}
