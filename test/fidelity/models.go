package fidelity

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/test/sim/models"
)

// Model groups of the models column, by a catalogue model's `nvml:` mapping
// (test/sim/capabilities.go defines what the mapping does).
const (
	// GroupX86: a discrete GPU on an x86 host (no numaNodeId: gpu-memory,
	// no unified memory).
	GroupX86 = "x86"
	// GroupGrace: numaNodeId: gpu-memory (GH200, GB200).
	GroupGrace = "grace"
	// GroupUnifiedMemory: unifiedMemory: true (an integrated GPU).
	GroupUnifiedMemory = "unified-memory"
)

// Groups are the model groups, in the order the document names them.
var Groups = []string{GroupX86, GroupGrace, GroupUnifiedMemory}

// Model is a catalogue model as the table sees it.
type Model struct {
	Name        string
	ProductName string
	Groups      []string
}

// modelFields are the fields of a test/sim/models file this package reads;
// test/sim validates the whole file.
type modelFields struct {
	Name        string `json:"name"`
	ProductName string `json:"productName"`
	NVML        *struct {
		NUMANodeID    string `json:"numaNodeId"`
		UnifiedMemory bool   `json:"unifiedMemory"`
	} `json:"nvml"`
}

// Catalogue is the simulator's model catalogue (test/sim/models), sorted
// by name.
var Catalogue = sync.OnceValues(func() ([]Model, error) {
	entries, err := models.Files.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("read the model catalogue: %w", err)
	}
	var out []Model
	for _, e := range entries {
		data, err := models.Files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("read test/sim/models/%s: %w", e.Name(), err)
		}
		var f modelFields
		if err := yaml.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("test/sim/models/%s: %w", e.Name(), err)
		}
		m := Model{Name: f.Name, ProductName: f.ProductName}
		switch {
		case f.NVML != nil && f.NVML.UnifiedMemory:
			m.Groups = []string{GroupUnifiedMemory}
		case f.NVML != nil && f.NVML.NUMANodeID == "gpu-memory":
			m.Groups = []string{GroupGrace}
		default:
			m.Groups = []string{GroupX86}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
})

// MatchProduct is the catalogue model whose product name is NVML's name of
// a GPU (nvmlDeviceGetName), ignoring case and surrounding space.
func MatchProduct(catalogue []Model, productName string) (Model, bool) {
	for _, m := range catalogue {
		if strings.EqualFold(strings.TrimSpace(productName), m.ProductName) {
			return m, true
		}
	}
	return Model{}, false
}

// Selector is a parsed models column: `all`, groups and model names,
// separated by commas.
type Selector struct {
	All    bool
	Groups []string
	Models []string
}

// ParseModels parses a models column; every item must be `all`, a group or
// a catalogue model's name.
func ParseModels(col string, catalogue []Model) (Selector, error) {
	var s Selector
	for _, item := range strings.Split(col, ",") {
		item = strings.Trim(strings.TrimSpace(item), "`")
		switch {
		case item == "all":
			s.All = true
		case slices.Contains(Groups, item):
			s.Groups = append(s.Groups, item)
		case slices.ContainsFunc(catalogue, func(m Model) bool { return m.Name == item }):
			s.Models = append(s.Models, item)
		default:
			names := make([]string, len(catalogue))
			for i, m := range catalogue {
				names[i] = m.Name
			}
			return Selector{}, fmt.Errorf("models column %q: %q is not `all`, a group (%s) or a catalogue model (%s)",
				col, item, strings.Join(Groups, ", "), strings.Join(names, ", "))
		}
	}
	return s, nil
}

// Applies reports whether a GPU of model (empty: not in the catalogue) in
// groups is one the row is about.
func (s Selector) Applies(model string, groups []string) bool {
	if s.All || (model != "" && slices.Contains(s.Models, model)) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(s.Groups, g) {
			return true
		}
	}
	return false
}
