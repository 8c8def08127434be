package plugin

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestDriverLayouts runs the plugin's node setup on each driver
// installation's layout (test/fakedriver Layouts): NVML is found, nvcdi
// mounts the driver's libraries from the layout's library directory, the
// tools are found in its tool directory and start with only libnvidia-ml
// preloaded, and a time slice is set through them.
func TestDriverLayouts(t *testing.T) {
	for _, layout := range []string{"host", "gke"} {
		t.Run(layout, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			o := testOptions(t)
			o.NvidiaDriverRoot = fakedriver.ForTestLayout(t, "l4", "node-a", layout)
			l := fakedriver.Layouts[layout]
			gpus, err := OpenNode(ctx, o)
			require.NoError(t, err)
			defer gpus.Close()
			require.NotEmpty(t, gpus.Node.GPUs)
			edits, err := gpus.Edits(ctx, o)
			require.NoError(t, err)
			common, err := edits.Common()
			require.NoError(t, err)
			var libs int
			for _, m := range common.Mounts {
				if filepath.Dir(m.HostPath) == filepath.Join(o.NvidiaDriverRoot, l.LibDir) {
					libs++
				}
			}
			require.Positive(t, libs, "nvcdi mounted no library of %s: %v", l.LibDir, common.Mounts)

			require.Equal(t, filepath.Join(o.NvidiaDriverRoot, l.BinDir, "nvidia-smi"), o.tool("", "nvidia-smi"))
			slicer, _, err := o.sharingTools(ctx)
			require.NoError(t, err)
			require.NoError(t, slicer.SetTimeSlice(ctx, gpus.Node.GPUs[0].UUID, v1alpha1.MediumTimeSlice))
		})
	}
}
