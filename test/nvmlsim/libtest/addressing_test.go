package libtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// TestAddressingMode: go-nvml's GetAddressingMode through the library. A
// Grace model with an R580 driver answers ATS; the same model, or an x86
// one, under an older driver lacks the call (FUNCTION_NOT_FOUND: the built
// library cannot withdraw the symbol itself, the in-process server's
// LookupSymbol reports it missing); x86 models answer NOT_SUPPORTED, the
// least kind answer an x86 host gives.
func TestAddressingMode(t *testing.T) {
	old := filepath.Join(t.TempDir(), "gb200-r570.yaml")
	require.NoError(t, os.WriteFile(old, []byte(`driverVersion: "570.133.20"
cudaDriverVersion: "12.8"
gpus:
  - {model: gb200}
`), 0o644))
	tests := []struct {
		profile string
		ret     nvml.Return
		mode    nvml.DeviceAddressingModeType
	}{
		{"gb200-nvl72-tray", nvml.SUCCESS, nvml.DEVICE_ADDRESSING_MODE_ATS},
		{"hgx-b200", nvml.ERROR_NOT_SUPPORTED, 0},
		{"dgx-h100", nvml.ERROR_FUNCTION_NOT_FOUND, 0},
		{old, nvml.ERROR_FUNCTION_NOT_FOUND, 0},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.profile), func(t *testing.T) {
			lib := open(t, newRoot(t, tc.profile))
			d, ret := lib.DeviceGetHandleByIndex(0)
			ok(t, ret)
			mode, ret := d.GetAddressingMode()
			require.Equal(t, tc.ret, ret)
			if ret == nvml.SUCCESS {
				require.Equal(t, uint32(tc.mode), mode.Value)
			}
		})
	}
}
