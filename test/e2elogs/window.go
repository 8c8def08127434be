package e2elogs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Copied is a file CopyWindows wrote and how many lines it has.
type Copied struct {
	Name  string
	Lines int
}

// CopyWindows writes into dst, for each regular file directly in src that
// has lines written from from to to, a file of the same name with those
// lines (CopyWindow). A missing src copies nothing.
func CopyWindows(dst, src string, from, to time.Time) ([]Copied, error) {
	entries, err := os.ReadDir(src)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the logs in %s: %w", src, err)
	}
	var out []Copied
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		n, err := copyWindowFile(filepath.Join(dst, e.Name()), filepath.Join(src, e.Name()), from, to)
		if err != nil {
			return out, err
		}
		if n > 0 {
			out = append(out, Copied{Name: e.Name(), Lines: n})
		}
	}
	return out, nil
}

func copyWindowFile(dst, src string, from, to time.Time) (int, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("open log %s: %w", src, err)
	}
	defer func() { _ = in.Close() }()
	var b bytes.Buffer
	n, err := CopyWindow(&b, in, from, to)
	if err != nil {
		return 0, fmt.Errorf("read log %s: %w", src, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, fmt.Errorf("the directory for %s: %w", dst, err)
	}
	if err := os.WriteFile(dst, b.Bytes(), 0o644); err != nil {
		return 0, fmt.Errorf("write %s: %w", dst, err)
	}
	return n, nil
}

// Tail is the last n lines of s, without its surrounding blank space.
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
