package libtest

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// TestModuleID: go-nvml's GetModuleId through the library. The GPUs of an
// 8-GPU baseboard answer their profile's module; a PCIe card and a MIG
// device answer NOT_SUPPORTED.
func TestModuleID(t *testing.T) {
	t.Run("dgx-h100", func(t *testing.T) {
		lib := open(t, newRoot(t, "dgx-h100"))
		for i := range 8 {
			d, ret := lib.DeviceGetHandleByIndex(i)
			ok(t, ret)
			id, ret := d.GetModuleId()
			ok(t, ret)
			require.Equal(t, i+1, id, "GPU %d", i)
		}
	})
	t.Run("l4", func(t *testing.T) {
		lib := open(t, newRoot(t, "l4"))
		d, ret := lib.DeviceGetHandleByIndex(0)
		ok(t, ret)
		_, ret = d.GetModuleId()
		require.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	})
	t.Run("MIG device", func(t *testing.T) {
		lib := open(t, newRoot(t, staticMIG))
		d, ret := lib.DeviceGetHandleByIndex(0)
		ok(t, ret)
		mig, ret := d.GetMigDeviceHandleByIndex(0)
		ok(t, ret)
		_, ret = mig.GetModuleId()
		require.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	})
}
