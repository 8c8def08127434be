package repo

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoot(t *testing.T) {
	root, err := Root()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	require.DirExists(t, filepath.Join(root, "test", "repo"), "this package lies under the root it found")

	t.Chdir(t.TempDir())
	_, err = Root()
	require.ErrorContains(t, err, "no go.mod")
}
