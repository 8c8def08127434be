// Command gpudra-tracked-files fails when git tracks a compiled program, any
// other binary file or a large file that hack/large-files.txt does not list
// with its reason: git should track source (make lint runs it). A binary is
// an ELF, Mach-O or PE program, or a file with a NUL byte in its first 8000
// bytes (git's own test); large is over --max-size. Run it at the
// repository root.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"

	"github.com/spf13/pflag"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("gpudra-tracked-files", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	allowPath := fs.String("allowlist", "hack/large-files.txt", "Files git may track although binary or large: \"PATH-OR-GLOB REASON\" lines.")
	maxSize := fs.Int64("max-size", 300<<10, "Largest file size, in bytes, git may track without a reason.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	af, err := os.Open(*allowPath)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-tracked-files:", err)
		return 2
	}
	allow, err := parseAllowlist(af, *allowPath)
	_ = af.Close()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-tracked-files:", err)
		return 2
	}
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-tracked-files: git ls-files:", err)
		return 2
	}
	var files []file
	for _, p := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		f, ok, err := readFile(p)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "gpudra-tracked-files:", err)
			return 2
		}
		if ok {
			files = append(files, f)
		}
	}
	problems := check(files, allow, *maxSize, *allowPath)
	for _, p := range problems {
		_, _ = fmt.Fprintln(stderr, p)
	}
	if len(problems) > 0 {
		_, _ = fmt.Fprintf(stderr, "gpudra-tracked-files: %d problem(s): git should track source only; remove a file from git with `git rm --cached PATH` "+
			"(and ignore it in .gitignore), or add \"PATH REASON\" to %s\n", len(problems), *allowPath)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "gpudra-tracked-files: %d tracked files, none binary or over %d KiB without a reason in %s\n", len(files), *maxSize>>10, *allowPath)
	return 0
}

// headSize is how much of a file is read for the binary test, as git does.
const headSize = 8000

// file is a tracked file: its path, size and first headSize bytes.
type file struct {
	Path string
	Size int64
	Head []byte
}

// readFile reads a tracked regular file; symlinks, submodules and files
// deleted from the work tree are not ok.
func readFile(p string) (file, bool, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return file{}, false, nil
	}
	if err != nil || !fi.Mode().IsRegular() {
		return file{}, false, err
	}
	f, err := os.Open(p)
	if err != nil {
		return file{}, false, err
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, headSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return file{}, false, fmt.Errorf("%s: %w", p, err)
	}
	return file{Path: p, Size: fi.Size(), Head: head[:n]}, true, nil
}

// allowed is an allowlist line: a path or a path.Match glob, and why git
// tracks what it matches.
type allowed struct {
	Pattern, Reason string
	Line            int
}

func parseAllowlist(r io.Reader, name string) ([]allowed, error) {
	var out []allowed
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("%s:%d: %q has no reason: want \"PATH-OR-GLOB REASON\"", name, n, line)
		}
		pattern, reason := splitField(line)
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("%s:%d: bad pattern %q: %w", name, n, pattern, err)
		}
		out = append(out, allowed{Pattern: pattern, Reason: reason, Line: n})
	}
	return out, sc.Err()
}

// splitField splits a line at its first run of blanks.
func splitField(line string) (first, rest string) {
	i := strings.IndexAny(line, " \t")
	return line[:i], strings.TrimSpace(line[i:])
}

// kind says what kind of binary a file's first bytes show, "" for none.
func kind(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "an ELF program or library"
	case bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xce}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xce, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "a Mach-O program"
	case bytes.HasPrefix(head, []byte("MZ")) && bytes.IndexByte(head, 0) >= 0:
		return "a PE (Windows) program"
	case bytes.IndexByte(head, 0) >= 0:
		return "a binary file (NUL bytes)"
	}
	return ""
}

// check returns a line for each file that is binary or over maxSize and no
// allowlist entry matches, and for each entry that matches no such file
// (stale: the file went or no longer needs it).
func check(files []file, allow []allowed, maxSize int64, allowName string) []string {
	var problems []string
	used := make([]bool, len(allow))
	for _, f := range files {
		var why []string
		if k := kind(f.Head); k != "" {
			why = append(why, k)
		}
		if f.Size > maxSize {
			why = append(why, fmt.Sprintf("%d KiB, over %d KiB", f.Size>>10, maxSize>>10))
		}
		if len(why) == 0 {
			continue
		}
		ok := false
		for i, a := range allow {
			if m, _ := path.Match(a.Pattern, f.Path); m || a.Pattern == f.Path {
				used[i], ok = true, true
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s", f.Path, strings.Join(why, ", ")))
		}
	}
	for i, a := range allow {
		if !used[i] {
			problems = append(problems, fmt.Sprintf("%s:%d: %s matches no tracked file that is binary or large: remove the line", allowName, a.Line, a.Pattern))
		}
	}
	return problems
}
