package nvmlnames

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"calls, sorted and distinct", "x := C.nvmlInit_v2()\ny := C.nvmlDeviceGetCount(&n)\nz := C.nvmlInit_v2()", []string{"nvmlDeviceGetCount", "nvmlInit_v2"}},
		{"types and other C names are not calls", "var d C.nvmlDevice_t\nC.free(p)\nC.nvmlReturn_t(1)\nfoo.C.nvmlX()\nABC.nvmlY()", nil},
		{"nested calls", "C.nvmlA(C.nvmlB(x))", []string{"nvmlA", "nvmlB"}},
		{"nothing", "package nvml", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Parse([]byte(tc.src)))
		})
	}
	_, err := FromFile(t.TempDir() + "/nvml.go")
	require.ErrorContains(t, err, "read go-nvml bindings")
}
