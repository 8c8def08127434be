package sim

import (
	"sort"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fidelity"
)

// TestFidelityDump prints what the simulator answers to the table's calls
// (test/fidelity), for writing rows.
func TestFidelityDump(t *testing.T) {
	if testing.Short() || !testing.Verbose() {
		t.Skip("only with -v")
	}
	names := fidelity.CallNames()
	sort.Strings(names)
	for _, name := range names {
		call, _ := fidelity.CallFor(name)
		for _, m := range fidelityModels(t, "all,grace,unified-memory") {
			s := m.server(t)
			d, ret := s.DeviceGetHandleByIndex(0)
			require.Equal(t, nvml.SUCCESS, ret)
			t.Logf("%s %s %s", name, m.name, fidelity.CodeName(call(s, d, 0)))
		}
	}
}
