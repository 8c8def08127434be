// Package repo locates the repository checkout for tests that read or scan
// its files (the layering check, the rename check).
package repo

import (
	"fmt"
	"os"
	"path/filepath"
)

// Root returns the directory of the go.mod at or above the working
// directory: the module root when run by go test in any of its packages.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
