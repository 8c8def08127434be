package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/images"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tar")
	w, err := images.Write(good, images.Image{Name: "registry.local/x:1", Entries: []images.Entry{images.DataFile("/a", []byte("a"), 0)}})
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad.tar")
	require.NoError(t, os.WriteFile(bad, []byte("not a tar"), 0o644))
	chart := filepath.Join("..", "..", "..", images.DefaultChartDir)

	for name, tc := range map[string]struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		"no args":        {nil, 2, "", "usage: gpudra-images"},
		"unknown":        {[]string{"push"}, 2, "", "usage: gpudra-images"},
		"names":          {[]string{"names", "--chart", chart}, 0, images.PauseImage + "\n" + images.WorkloadImage + "\nghcr.io/gpudra/gpudra:dev\n", ""},
		"names no chart": {[]string{"names", "--chart", dir}, 1, "", "read the chart's values"},
		"build no out":   {[]string{"build"}, 2, "", "build needs --out DIR"},
		"build no bins": {[]string{"build", "--out", dir, "--bin-dir", dir}, 1, "",
			"pause.tar: read ELF binary " + dir + "/gpudra-pause: open " + dir + "/gpudra-pause: no such file or directory (make images builds"},
		"failpoints no bin-dir": {[]string{"build-failpoints", "--out", dir}, 2, "", "build-failpoints needs --out DIR, --bin-dir DIR"},
		"failpoints no bins": {[]string{"build-failpoints", "--out", dir, "--bin-dir", dir}, 1, "",
			"gpudra-failpoints.tar: read the Go build settings of " + dir + "/gpu-kubelet-plugin"},
		"verify":         {[]string{"verify", good}, 0, good + ": registry.local/x:1, manifest " + w.Manifest.Digest + ", 1 files, layer ", ""},
		"verify bad":     {[]string{"verify", good, bad}, 1, good + ": registry.local/x:1", bad},
		"verify nothing": {[]string{"verify"}, 2, "", "verify needs image tarballs"},
		"bad flag":       {[]string{"build", "--nope"}, 2, "", "unknown flag: --nope"},
	} {
		var stdout, stderr strings.Builder
		assert.Equal(t, tc.code, run(tc.args, &stdout, &stderr), name)
		assert.True(t, strings.HasPrefix(stdout.String(), tc.stdout), "%s: stdout %q", name, stdout.String())
		assert.Contains(t, stderr.String(), tc.stderr, name)
	}
	left, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	require.NoError(t, err)
	assert.Len(t, left, 2, "a failed build leaves no tarball")
}
