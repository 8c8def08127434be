package images

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The failpoints image is the gpudra image, file for file, with the
// failpoints plugin; each spec refuses the other's plugin.
func TestFailpointsSpec(t *testing.T) {
	src := testSources(t)
	withFailpoints := src
	withFailpoints.BinDir = linkDir(t, map[string]string{
		PluginBinary:     filepath.Join(src.BinDir, "failpoints"),
		ControllerBinary: filepath.Join(src.BinDir, ControllerBinary),
	})
	img, err := FailpointsSpec(withFailpoints)
	require.NoError(t, err)
	assert.Equal(t, "ghcr.io/gpudra/gpudra:"+FailpointsImageTag, img.Name)
	shipped, err := GpudraSpec(src)
	require.NoError(t, err)
	assert.Equal(t, shipped.Config, img.Config)
	require.Len(t, img.Entries, len(shipped.Entries))
	for i, e := range img.Entries {
		want := shipped.Entries[i]
		if filepath.Dir(e.Source) == withFailpoints.BinDir { // the two binaries, from their own directory
			assert.Equal(t, filepath.Base(want.Source), filepath.Base(e.Source))
			e.Source = want.Source
		}
		assert.Equal(t, want, e, e.Path)
	}

	_, err = FailpointsSpec(src)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "built without -tags failpoints")
	}
	_, err = GpudraSpec(withFailpoints)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "built with -tags failpoints; only the failpoints image")
	}
}
