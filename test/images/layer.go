package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// EntryType is what an Entry puts into the image's file system.
type EntryType int

const (
	// File is a regular file with Data or the content of Source.
	File EntryType = iota
	// Dir is a directory.
	Dir
	// Symlink is a symbolic link to Target.
	Symlink
)

func (t EntryType) String() string {
	switch t {
	case File:
		return "file"
	case Dir:
		return "directory"
	case Symlink:
		return "symlink"
	}
	return fmt.Sprintf("EntryType(%d)", int(t))
}

// Entry is one file system object of an image's layer.
type Entry struct {
	// Path is the absolute path in the image, e.g. /usr/local/bin/tool.
	Path string
	Type EntryType
	// Mode holds the permission bits and the setuid, setgid and sticky
	// bits, given as fs.ModeSetuid etc. or as octal (0o1777). Zero means: for a File from Source,
	// the host file's permission bits; for a Dir 0755; else 0644.
	Mode fs.FileMode
	// UID and GID own the entry in the image (the host file's owner is
	// never used: images are the same whoever builds them).
	UID, GID int
	// Source is the host file whose content a File gets (symlinks are
	// followed); when empty the File holds Data.
	Source string
	Data   []byte
	// Target is where a Symlink points.
	Target string
}

// HostFile is a root-owned File at path with the content of the host file src.
func HostFile(path, src string, mode fs.FileMode) Entry {
	return Entry{Path: path, Type: File, Source: src, Mode: mode}
}

// DataFile is a root-owned File at path holding data.
func DataFile(path string, data []byte, mode fs.FileMode) Entry {
	return Entry{Path: path, Type: File, Data: data, Mode: mode}
}

// Directory is a root-owned directory.
func Directory(path string, mode fs.FileMode) Entry {
	return Entry{Path: path, Type: Dir, Mode: mode}
}

// Link is a symbolic link at path to target.
func Link(path, target string) Entry {
	return Entry{Path: path, Type: Symlink, Target: target, Mode: 0o777}
}

// Epoch is the modification time of every file in the images, so that the
// same inputs give the same digests.
var Epoch = time.Unix(0, 0).UTC()

// normalize checks the entries, adds the parent directories nobody listed
// (root-owned, 0755) and sorts them by path, parents first.
func normalize(entries []Entry) ([]Entry, error) {
	byPath := make(map[string]Entry, len(entries))
	for _, e := range entries {
		if !strings.HasPrefix(e.Path, "/") {
			return nil, fmt.Errorf("image path %q is not absolute", e.Path)
		}
		e.Path = path.Clean(e.Path)
		if e.Path == "/" {
			return nil, errors.New("the image root / cannot be an entry")
		}
		if _, dup := byPath[e.Path]; dup {
			return nil, fmt.Errorf("image path %s is listed twice", e.Path)
		}
		switch e.Type {
		case File, Dir:
		case Symlink:
			if e.Target == "" {
				return nil, fmt.Errorf("symlink %s has no target", e.Path)
			}
		default:
			return nil, fmt.Errorf("image path %s: unknown entry type %v", e.Path, e.Type)
		}
		byPath[e.Path] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			switch {
			case !ok:
				byPath[dir] = Directory(dir, 0o755)
			case parent.Type != Dir:
				return nil, fmt.Errorf("image path %s is below %s, which is a %v, not a directory", p, dir, parent.Type)
			}
		}
	}
	out := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// writeLayer writes the entries as an uncompressed layer tar to w.
func writeLayer(w io.Writer, entries []Entry) error {
	entries, err := normalize(entries)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish layer tar: %w", err)
	}
	return nil
}

func writeEntry(tw *tar.Writer, e Entry) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: Epoch,
	}
	mode := e.Mode
	var src *os.File
	switch e.Type {
	case Dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		if mode == 0 {
			mode = 0o755
		}
	case Symlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
		mode = 0o777
	case File:
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.Data))
		if e.Source != "" {
			f, err := os.Open(e.Source)
			if err != nil {
				return fmt.Errorf("image file %s: %w", e.Path, err)
			}
			defer func() { _ = f.Close() }()
			info, err := f.Stat()
			if err != nil {
				return fmt.Errorf("image file %s: %w", e.Path, err)
			}
			if !info.Mode().IsRegular() {
				return fmt.Errorf("image file %s: source %s is not a regular file", e.Path, e.Source)
			}
			if mode == 0 {
				mode = info.Mode().Perm()
			}
			src, hdr.Size = f, info.Size()
		}
		if mode == 0 {
			mode = 0o644
		}
	}
	hdr.Mode = tarMode(mode)
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("layer tar header of %s: %w", e.Path, err)
	}
	var err error
	if src != nil {
		var n int64
		n, err = io.Copy(tw, src)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("source %s changed size while it was read", e.Source)
		}
	} else if e.Type == File {
		_, err = tw.Write(e.Data)
	}
	if err != nil {
		return fmt.Errorf("layer tar content of %s: %w", e.Path, err)
	}
	return nil
}

// tarMode converts permission and special bits to the tar header's mode.
// The special bits may come as octal (0o4000, 0o2000, 0o1000) or as
// fs.FileMode flags.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm()) | int64(m&0o7000)
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
