package nvmlsim

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		want    func(root string) Config
		wantErr string
	}{
		{
			name: "relative paths are under the root",
			json: `{"profile": "dgx-h100", "profileDirs": ["etc/profiles", "/abs"], "node": "n1",
				"stateFile": "var/lib/gpudra-sim/nvml-state.json", "faultFile": "var/lib/gpudra-sim/faults"}`,
			want: func(root string) Config {
				return Config{Profile: "dgx-h100", ProfileDirs: []string{filepath.Join(root, "etc/profiles"), "/abs"}, Node: "n1",
					StateFile: filepath.Join(root, "var/lib/gpudra-sim/nvml-state.json"), FaultFile: filepath.Join(root, "var/lib/gpudra-sim/faults")}
			},
		},
		{
			name: "a profile file is under the root too",
			json: `{"profile": "etc/gpudra-sim/profile.yaml", "node": "n1"}`,
			want: func(root string) Config {
				return Config{Profile: filepath.Join(root, "etc/gpudra-sim/profile.yaml"), Node: "n1"}
			},
		},
		{
			name: "absolute profile file",
			json: `{"profile": "/profiles/x.yaml", "node": "n1"}`,
			want: func(string) Config { return Config{Profile: "/profiles/x.yaml", Node: "n1"} },
		},
		{name: "unknown field", json: `{"profile": "l4", "node": "n1", "nodes": "x"}`, wantErr: `unknown field "nodes"`},
		{name: "no profile", json: `{"node": "n1"}`, wantErr: "profile is empty"},
		{name: "no node", json: `{"profile": "l4"}`, wantErr: "node is empty"},
		{name: "not JSON", json: `profile: l4`, wantErr: "invalid character"},
		{name: "two values", json: `{"profile": "l4", "node": "n"} {}`, wantErr: "more than one JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, ConfigPath), tc.json)
			got, err := LoadConfig(root)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, filepath.Join(root, ConfigPath), "the error names the file")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want(root), *got)
		})
	}
	_, err := LoadConfig(t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestWriteConfigRoundTrip(t *testing.T) {
	root := t.TempDir()
	c := Config{Profile: "l4", Node: "n", StateFile: "/s", FaultFile: "/f"}
	require.NoError(t, WriteConfig(root, c))
	got, err := LoadConfig(root)
	require.NoError(t, err)
	require.Equal(t, c, *got)
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, ConfigPath), `{}`)
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	writeFile(t, lib, "")
	elsewhere := t.TempDir()

	got, err := FindRoot("", []string{"", lib})
	require.NoError(t, err)
	require.Equal(t, root, got)

	got, err = FindRoot(root, []string{filepath.Join(elsewhere, "lib.so")})
	require.NoError(t, err)
	require.Equal(t, root, got, "the environment wins")

	_, err = FindRoot(elsewhere, []string{lib})
	require.ErrorContains(t, err, RootEnv+"="+elsewhere)

	_, err = FindRoot("", []string{filepath.Join(elsewhere, "lib.so")})
	require.ErrorContains(t, err, "no "+ConfigPath+" in any directory above "+filepath.Join(elsewhere, "lib.so"))

	_, err = FindRoot("", nil)
	require.ErrorContains(t, err, "cannot tell its own file path")
}

func TestMappedFile(t *testing.T) {
	maps := []byte(`55d4c6a00000-55d4c6a21000 r--p 00000000 08:01 1 /usr/bin/plugin
7f0000000000-7f0000100000 r-xp 00001000 08:01 2 /driver root/usr/lib/libnvidia-ml.so.550 (deleted)
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
`)
	for _, tc := range []struct {
		addr uintptr
		want string
		ok   bool
	}{
		{0x55d4c6a00000, "/usr/bin/plugin", true},
		{0x7f0000000fff, "/driver root/usr/lib/libnvidia-ml.so.550", true},
		{0x7f0000100000, "", false}, // anonymous
		{0x7ffd00000010, "", false}, // [stack]
		{0x1000, "", false},
	} {
		got, ok := MappedFile(maps, tc.addr)
		require.Equal(t, tc.ok, ok, "%#x", tc.addr)
		require.Equal(t, tc.want, got, "%#x", tc.addr)
	}
}

func TestSelfPaths(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "libnvidia-ml.so.550.1")
	writeFile(t, real, "")
	link := filepath.Join(dir, "libnvidia-ml.so.1")
	require.NoError(t, os.Symlink(filepath.Base(real), link))

	// Code of this test binary: /proc/self/maps shows the executable there.
	addr := reflect.ValueOf(TestSelfPaths).Pointer()
	got := SelfPaths(link, addr)
	require.GreaterOrEqual(t, len(got), 3)
	require.Equal(t, []string{link, real}, got[:2])
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(got[2], filepath.Base(exe)), "%v", got)

	require.Equal(t, got[2:], SelfPaths("", addr), "no name from dladdr")
}
