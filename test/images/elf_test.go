package images

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRoot lays out a merged-/usr tree like Debian 12's under a temp dir.
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/bin", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for link, target := range map[string]string{
		"lib": "usr/lib", "lib64": "usr/lib64", "bin": "usr/bin",
		"usr/lib64/ld-linux-x86-64.so.2": "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"loop-a":                         "loop-b", "loop-b": "loop-a",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, link)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), []byte("ld"), 0o755))
	return root
}

func TestHostPathEntries(t *testing.T) {
	root := fakeRoot(t)
	entries := map[string]Entry{}
	require.NoError(t, hostPathEntries(root, "/lib64/ld-linux-x86-64.so.2", entries))
	// The same path again and one sharing its links change nothing.
	require.NoError(t, hostPathEntries(root, "/lib64/ld-linux-x86-64.so.2", entries))
	require.NoError(t, hostPathEntries(root, "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", entries))
	assert.Equal(t, map[string]Entry{
		"/lib64":                          Link("/lib64", "usr/lib64"),
		"/usr/lib64/ld-linux-x86-64.so.2": Link("/usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
		"/lib":                            Link("/lib", "usr/lib"),
		"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": HostFile("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
			filepath.Join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), 0),
	}, entries)
	// They make a valid layer: nothing lies below one of the symlinks.
	var list []Entry
	for _, e := range entries {
		list = append(list, e)
	}
	require.NoError(t, writeLayer(io.Discard, list))

	for p, want := range map[string]string{
		"/loop-a":  "too many symlinks",
		"/usr/lib": "is a directory",
		"/nothere": "no such file",
		"/lib/x":   "/usr/lib/x",
	} {
		err := hostPathEntries(root, p, map[string]Entry{})
		if assert.Error(t, err, p) {
			assert.Contains(t, err.Error(), want, p)
		}
	}
}

// hostDynamicBinary is a dynamically linked binary of this machine.
func hostDynamicBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/ls", "/bin/ls", "/usr/bin/env"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		interp, _, err := dynamicInfo(f)
		_ = f.Close()
		if err == nil && interp != "" {
			return p
		}
	}
	t.Skip("no dynamically linked ELF binary (ls, env) on this machine")
	return ""
}

func TestHostRuntime(t *testing.T) {
	bin := hostDynamicBinary(t)
	rt, err := HostRuntime("/", []string{bin}, []string{"libm.so.6"})
	require.NoError(t, err)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	interp, needed, err := dynamicInfo(f)
	_ = f.Close()
	require.NoError(t, err)
	assert.Equal(t, interp, rt.Interpreter)
	for _, n := range append(needed, "libm.so.6") {
		assert.Contains(t, rt.Libraries, n)
	}
	// The closure: every library's own needs are there too.
	for soname, p := range rt.Libraries {
		lf, err := elf.Open(p)
		require.NoError(t, err, soname)
		_, libNeeded, err := dynamicInfo(lf)
		_ = lf.Close()
		require.NoError(t, err)
		for _, n := range libNeeded {
			assert.Contains(t, rt.Libraries, n, "needed by %s", soname)
		}
	}
	// The entries resolve the interpreter and each library to a file.
	byPath := map[string]Entry{}
	for _, e := range rt.Entries {
		byPath[e.Path] = e
	}
	for _, p := range append([]string{rt.Interpreter}, values(rt.Libraries)...) {
		e, ok := resolveIn(byPath, p)
		if assert.True(t, ok, "%s does not resolve in the image", p) {
			assert.Equal(t, File, e.Type, p)
		}
	}
	require.NoError(t, writeLayer(io.Discard, rt.Entries))
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// resolveIn follows symlinks among the entries, component by component.
func resolveIn(entries map[string]Entry, p string) (Entry, bool) {
	for range maxLinks {
		cur, resolved := "", false
		for _, c := range filepathSplit(p) {
			cur += "/" + c
			if e, ok := entries[cur]; ok && e.Type == Symlink {
				target := e.Target
				if target[0] != '/' {
					target = filepath.Join(filepath.Dir(cur), target)
				}
				p = filepath.Join(target, p[len(cur):])
				resolved = true
				break
			}
		}
		if !resolved {
			e, ok := entries[p]
			return e, ok
		}
	}
	return Entry{}, false
}

func filepathSplit(p string) []string {
	var out []string
	for p = filepath.Clean(p); p != "/"; p = filepath.Dir(p) {
		out = append([]string{filepath.Base(p)}, out...)
	}
	return out
}

func TestHostRuntimeErrors(t *testing.T) {
	bin := hostDynamicBinary(t)
	// The binary alone under an empty root: its libraries are missing.
	root := t.TempDir()
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "tool"), data, 0o755))
	_, err = HostRuntime(root, []string{filepath.Join(root, "tool")}, nil)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "not found on this machine")
	}
	_, err = HostRuntime("/", []string{bin}, []string{"libgpudra-nonexistent.so.1"})
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "library libgpudra-nonexistent.so.1 (")
		assert.Contains(t, err.Error(), "not found on this machine")
	}
	_, err = HostRuntime("/", nil, nil)
	assert.Error(t, err)

	// A static binary has no interpreter.
	static := filepath.Join(root, "static")
	require.NoError(t, os.WriteFile(static, staticELF(t), 0o755))
	_, err = HostRuntime("/", []string{static}, nil)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "statically linked")
	}
}

// staticELF is an ELF executable header with no program headers: no
// PT_INTERP, no dynamic section, as a statically linked program has.
func staticELF(t *testing.T) []byte {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56, Shentsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, h))
	return buf.Bytes()
}
