package images

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// Runtime is what dynamically linked binaries need from the host to run in
// an image: the program interpreter (the dynamic loader) and the shared
// libraries of their DT_NEEDED entries, transitively.
type Runtime struct {
	// Interpreter is the loader's path from the binaries' PT_INTERP.
	Interpreter string
	// Libraries maps each needed soname to the host path it was found at.
	Libraries map[string]string
	// Entries put the interpreter and the libraries into an image at the
	// paths the loader uses, keeping the host's symlinks on the way (e.g.
	// /lib64 -> usr/lib64 on a merged-/usr system), so that the image's
	// layout is the host's.
	Entries []Entry
}

// multiarch is Debian's library directory name per ELF machine.
var multiarch = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64-linux-gnu",
	elf.EM_AARCH64: "aarch64-linux-gnu",
}

// librarySearchPath is where the loader looks for a soname when a binary
// names no run path and there is no ld.so.cache: the multiarch directories
// first, as Debian's glibc does.
func librarySearchPath(m elf.Machine) []string {
	dirs := []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	if t, ok := multiarch[m]; ok {
		dirs = append([]string{"/lib/" + t, "/usr/lib/" + t}, dirs...)
	}
	return dirs
}

// HostRuntime finds, under root ("/" normally), the loader and libraries
// that binaries (host paths) need, plus the libraries named in extra
// (sonames, e.g. libraries loaded with dlopen at run time). Every binary
// must be dynamically linked, for the same machine, with the same
// interpreter.
func HostRuntime(root string, binaries, extra []string) (*Runtime, error) {
	rt := &Runtime{Libraries: map[string]string{}}
	var machine elf.Machine
	var queue []string
	for _, bin := range binaries {
		f, err := elf.Open(bin)
		if err != nil {
			return nil, fmt.Errorf("read ELF binary %s: %w", bin, err)
		}
		interp, needed, err := dynamicInfo(f)
		m := f.Machine
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("ELF binary %s: %w", bin, err)
		}
		if interp == "" {
			return nil, fmt.Errorf("%s is statically linked: it has no program interpreter (was it built with CGO_ENABLED=1?)", bin)
		}
		if rt.Interpreter != "" && (interp != rt.Interpreter || m != machine) {
			return nil, fmt.Errorf("%s needs %s (%v), %s needs %s (%v): build them for one platform", binaries[0], rt.Interpreter, machine, bin, interp, m)
		}
		rt.Interpreter, machine = interp, m
		queue = append(queue, needed...)
	}
	if rt.Interpreter == "" {
		return nil, errors.New("no binaries given")
	}
	queue = append(queue, extra...)
	for len(queue) > 0 {
		soname := queue[0]
		queue = queue[1:]
		if _, done := rt.Libraries[soname]; done {
			continue
		}
		p, needed, err := findLibrary(root, soname, machine)
		if err != nil {
			return nil, err
		}
		rt.Libraries[soname] = p
		queue = append(queue, needed...)
	}
	paths := []string{rt.Interpreter}
	for _, p := range rt.Libraries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := map[string]Entry{}
	for _, p := range paths {
		if err := hostPathEntries(root, p, entries); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		rt.Entries = append(rt.Entries, e)
	}
	sort.Slice(rt.Entries, func(i, j int) bool { return rt.Entries[i].Path < rt.Entries[j].Path })
	return rt, nil
}

// dynamicInfo returns an ELF file's program interpreter ("" when it has
// none) and its DT_NEEDED sonames.
func dynamicInfo(f *elf.File) (string, []string, error) {
	var interp string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", nil, fmt.Errorf("read PT_INTERP: %w", err)
		}
		interp = strings.TrimRight(string(b), "\x00")
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	return interp, needed, nil
}

// findLibrary looks for soname in the search path under root and returns
// its path (as the loader names it, not resolved) and DT_NEEDED entries.
// Files of another machine or class (e.g. 32-bit libraries) are skipped.
func findLibrary(root, soname string, machine elf.Machine) (string, []string, error) {
	if strings.Contains(soname, "/") {
		return "", nil, fmt.Errorf("library %q: paths in DT_NEEDED are not supported", soname)
	}
	dirs := librarySearchPath(machine)
	for _, dir := range dirs {
		p := path.Join(dir, soname)
		f, err := elf.Open(path.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read library %s: %w", p, err)
		}
		_, needed, err := dynamicInfo(f)
		m, class := f.Machine, f.Class
		_ = f.Close()
		if m != machine || class != elf.ELFCLASS64 {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("library %s: %w", p, err)
		}
		return p, needed, nil
	}
	return "", nil, fmt.Errorf("library %s (%v) not found on this machine in %s: install the package that provides it",
		soname, machine, strings.Join(dirs, ", "))
}

// maxLinks bounds the symlinks followed for one path.
const maxLinks = 40

// hostPathEntries adds the entries that make p resolve in an image as it
// does under root: each symlink met on the way (followed) and the file at
// the end. entries is keyed by image path.
func hostPathEntries(root, p string, entries map[string]Entry) error {
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		info, err := os.Lstat(path.Join(root, next))
		if err != nil {
			return fmt.Errorf("host path %s (for %s): %w", next, p, err)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if links++; links > maxLinks {
				return fmt.Errorf("host path %s: too many symlinks", p)
			}
			target, err := os.Readlink(path.Join(root, next))
			if err != nil {
				return fmt.Errorf("host path %s (for %s): %w", next, p, err)
			}
			if err := addEntry(entries, Link(next, target)); err != nil {
				return err
			}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
			cur = "/"
		case info.IsDir():
			cur = next
		case len(rest) == 0 && info.Mode().IsRegular():
			return addEntry(entries, HostFile(next, path.Join(root, next), 0))
		default:
			return fmt.Errorf("host path %s (for %s) is neither a directory, a symlink nor a regular file", next, p)
		}
	}
	return fmt.Errorf("host path %s is a directory, not a file", p)
}

// addEntry adds e unless an equal entry is there; a different one is an error.
func addEntry(entries map[string]Entry, e Entry) error {
	old, ok := entries[e.Path]
	if ok && (old.Type != e.Type || old.Target != e.Target || old.Source != e.Source) {
		return fmt.Errorf("image path %s is needed as a %v and as a %v", e.Path, old.Type, e.Type)
	}
	entries[e.Path] = e
	return nil
}
