package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testImage(t *testing.T) Image {
	t.Helper()
	host := filepath.Join(t.TempDir(), "tool")
	require.NoError(t, os.WriteFile(host, []byte("#!/bin/true\n"), 0o750))
	return Image{
		Name: "registry.local/gpudra/test:1",
		Config: Config{User: "65532:65532", Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/tool"},
			Cmd: []string{"--help"}, WorkingDir: "/work"},
		Entries: []Entry{
			Link("/bin/sh", "tool"),
			HostFile("/bin/tool", host, 0),
			DataFile("/etc/passwd", []byte("root:x:0:0::/root:/bin/sh\n"), 0o644),
			Directory("/tmp", 0o1777),
			{Path: "/home/user/", Type: Dir, Mode: 0o700, UID: 1000, GID: 100},
			{Path: "/bin/suid", Type: File, Data: []byte("x"), Mode: 0o755 | fs.ModeSetuid},
		},
	}
}

func TestWriteRead(t *testing.T) {
	for _, uncompressed := range []bool{false, true} {
		img := testImage(t)
		img.Uncompressed = uncompressed
		out := filepath.Join(t.TempDir(), "test.tar")
		w, err := Write(out, img)
		require.NoError(t, err)

		c, err := Read(out)
		require.NoError(t, err)
		assert.Equal(t, img.Name, c.Name)
		assert.Equal(t, img.Config, c.Config)
		assert.Equal(t, "linux", c.OS)
		assert.Equal(t, w.Layer, c.Layer)
		assert.Equal(t, []string{w.DiffID}, c.DiffIDs)
		wantType := MediaTypeLayerGzip
		if uncompressed {
			wantType = MediaTypeLayer
			assert.Equal(t, w.DiffID, w.Layer.Digest, "a plain tar layer's digest is its diff_id")
		} else {
			assert.NotEqual(t, w.DiffID, w.Layer.Digest)
		}
		assert.Equal(t, wantType, c.Layer.MediaType)

		// Parents are added, everything sorted, parents first.
		assert.Equal(t, []string{"/bin", "/bin/sh", "/bin/suid", "/bin/tool", "/etc", "/etc/passwd",
			"/home", "/home/user", "/tmp"}, c.Order)
		type meta struct {
			typ      EntryType
			mode     int64
			uid, gid int
			target   string
		}
		want := map[string]meta{
			"/bin":        {Dir, 0o755, 0, 0, ""},
			"/bin/sh":     {Symlink, 0o777, 0, 0, "tool"},
			"/bin/suid":   {File, 0o4755, 0, 0, ""},
			"/bin/tool":   {File, 0o750, 0, 0, ""}, // the host file's mode
			"/etc/passwd": {File, 0o644, 0, 0, ""},
			"/home/user":  {Dir, 0o700, 1000, 100, ""},
			"/tmp":        {Dir, 0o1777, 0, 0, ""},
		}
		for p, m := range want {
			f := c.Files[p]
			assert.Equal(t, m, meta{f.Type, f.Mode, f.UID, f.GID, f.Target}, p)
		}
		assert.Equal(t, "#!/bin/true\n", string(c.Files["/bin/tool"].Data))
		sum := sha256.Sum256([]byte("#!/bin/true\n"))
		assert.Equal(t, hex.EncodeToString(sum[:]), c.Files["/bin/tool"].SHA256)
	}
}

// TestWriteDeterministic: the same image gives the same bytes.
func TestWriteDeterministic(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	a, err := Write(filepath.Join(dir, "a.tar"), img)
	require.NoError(t, err)
	b, err := Write(filepath.Join(dir, "b.tar"), img)
	require.NoError(t, err)
	assert.Equal(t, a.Manifest.Digest, b.Manifest.Digest)
	da, err := os.ReadFile(a.Path)
	require.NoError(t, err)
	db, err := os.ReadFile(b.Path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(da, db), "the two tarballs differ")
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "temporary files left behind")
}

// TestLayoutStructure checks the tarball's own entries and index.json.
func TestLayoutStructure(t *testing.T) {
	w, err := Write(filepath.Join(t.TempDir(), "x.tar"), testImage(t))
	require.NoError(t, err)
	files := readTar(t, w.Path)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{"oci-layout", "index.json", blobPath(w.Layer.Digest),
		blobPath(w.Config.Digest), blobPath(w.Manifest.Digest)}, names)
	var idx map[string]any
	require.NoError(t, json.Unmarshal(files["index.json"], &idx))
	m := idx["manifests"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{AnnotationRefName: "registry.local/gpudra/test:1",
		AnnotationImageName: "registry.local/gpudra/test:1"}, m["annotations"])
	assert.Equal(t, MediaTypeManifest, m["mediaType"])
}

// TestReadRejects: Read notices each kind of damage.
func TestReadRejects(t *testing.T) {
	w, err := Write(filepath.Join(t.TempDir(), "x.tar"), testImage(t))
	require.NoError(t, err)
	cfgPath, layerPath := blobPath(w.Config.Digest), blobPath(w.Layer.Digest)
	for name, tc := range map[string]struct {
		damage func(files map[string][]byte)
		want   string
	}{
		"layer byte flipped": {func(f map[string][]byte) { f[layerPath][20] ^= 1 }, "has sha256"},
		"no oci-layout":      {func(f map[string][]byte) { delete(f, "oci-layout") }, "oci-layout"},
		"no layer": {func(f map[string][]byte) { delete(f, layerPath) },
			"layer blob " + w.Layer.Digest},
		"wrong diff_id": {func(f map[string][]byte) {
			replaceConfig(t, f, w, bytes.Replace(f[cfgPath], []byte(w.DiffID), []byte("sha256:"+strings.Repeat("0", 64)), 1))
		}, "config diff_id"},
		"config size": {func(f map[string][]byte) { f[cfgPath] = append(f[cfgPath], ' ') }, "has sha256"},
		"name missing": {func(f map[string][]byte) {
			f["index.json"] = bytes.Replace(f["index.json"], []byte(AnnotationImageName), []byte("x"), 1)
		}, "same full name"},
	} {
		files := readTar(t, w.Path)
		tc.damage(files)
		bad := filepath.Join(t.TempDir(), "bad.tar")
		writeTar(t, bad, files)
		_, err := Read(bad)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

// replaceConfig stores cfg as the config blob and rewrites the manifest
// and index.json to point at it, so that only the config's content is wrong.
func replaceConfig(t *testing.T, files map[string][]byte, w *Written, cfg []byte) {
	t.Helper()
	var mf manifest
	require.NoError(t, json.Unmarshal(files[blobPath(w.Manifest.Digest)], &mf))
	mf.Config = blobDescriptor(MediaTypeConfig, cfg)
	files[blobPath(mf.Config.Digest)] = cfg
	mfJSON, err := json.Marshal(mf)
	require.NoError(t, err)
	d := blobDescriptor(MediaTypeManifest, mfJSON)
	files[blobPath(d.Digest)] = mfJSON
	var idx index
	require.NoError(t, json.Unmarshal(files["index.json"], &idx))
	idx.Manifests[0].Digest, idx.Manifests[0].Size = d.Digest, d.Size
	files["index.json"], err = json.Marshal(idx)
	require.NoError(t, err)
}

func TestNormalizeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		entries []Entry
		want    string
	}{
		"relative":       {[]Entry{Directory("bin", 0)}, "not absolute"},
		"root":           {[]Entry{Directory("/", 0)}, "root"},
		"twice":          {[]Entry{Directory("/bin", 0), Link("/bin/", "usr/bin")}, "listed twice"},
		"below symlink":  {[]Entry{Link("/lib", "usr/lib"), DataFile("/lib/x", nil, 0)}, "below /lib, which is a symlink"},
		"below file":     {[]Entry{DataFile("/etc", nil, 0), DataFile("/etc/x", nil, 0)}, "which is a file"},
		"empty target":   {[]Entry{Link("/x", "")}, "no target"},
		"missing source": {[]Entry{HostFile("/x", "/nonexistent/file", 0)}, "/nonexistent/file"},
	} {
		err := writeLayer(io.Discard, tc.entries)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		if hdr.Typeflag == tar.TypeReg {
			files[hdr.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
}

func writeTar(t *testing.T, path string, files map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}
