package images

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// treeSkip are directories of an unpacked Debian root that a container
// never reads: documentation, manuals, translations, bug-report hooks.
var treeSkip = []string{"/usr/share/doc", "/usr/share/man", "/usr/share/info", "/usr/share/locale",
	"/usr/share/lintian", "/usr/share/bug"}

// TreeEntries are the entries of the directory tree at root (Debian
// packages unpacked with dpkg-deb -x): its directories, files (with their
// permission bits) and symbolic links (targets kept as they are), owned by
// root, except under treeSkip.
func TreeEntries(root string) ([]Entry, error) {
	var entries []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		img := path.Join("/", filepath.ToSlash(rel))
		for _, s := range treeSkip {
			if img == s || strings.HasPrefix(img, s+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if strings.HasPrefix(path.Base(img), ".") && path.Dir(img) == "/" {
			return nil // the Makefile's stamp (.packages)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			entries = append(entries, Directory(img, info.Mode().Perm()))
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			entries = append(entries, Link(img, target))
		case info.Mode().IsRegular():
			entries = append(entries, HostFile(img, p, info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)))
		default:
			return fmt.Errorf("%s: a %v, not a file, directory or symbolic link", p, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the tree %s: %w", root, err)
	}
	return entries, nil
}
