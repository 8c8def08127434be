package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// maxLines is the most lines of one failed test printed again: its last ones,
// where the failure and what was cleaned up after it are.
const maxLines = 400

// copyAndSummarize copies r to w line by line, keeping the lines of the
// running top-level test, then writes the kept lines of each failed
// top-level test again (at most limit lines each, the last ones).
func copyAndSummarize(r io.Reader, w io.Writer, limit int) error {
	bw := bufio.NewWriter(w)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	type failure struct {
		name  string
		lines []string
	}
	var (
		current string
		lines   []string
		failed  []failure
	)
	for sc.Scan() {
		line := sc.Text()
		if _, err := bw.WriteString(line + "\n"); err != nil {
			return err
		}
		if name, ok := topLevel(line, "=== RUN   "); ok {
			current, lines = name, nil
		}
		if current != "" {
			lines = append(lines, line)
		}
		for _, verdict := range []string{"--- FAIL: ", "--- PASS: ", "--- SKIP: "} {
			name, ok := topLevel(line, verdict)
			if !ok || name != current {
				continue
			}
			if verdict == "--- FAIL: " {
				failed = append(failed, failure{name, lines})
			}
			current, lines = "", nil
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the test output: %w", err)
	}
	if current != "" { // a test that never ended: a panic or the -timeout
		failed = append(failed, failure{current, lines})
	}
	var sum strings.Builder
	if len(failed) > 0 {
		names := make([]string, len(failed))
		for i, f := range failed {
			names[i] = f.name
		}
		fmt.Fprintf(&sum, "\n==== %d failed test(s): %s; their output again ====\n", len(failed), strings.Join(names, ", "))
	}
	for _, f := range failed {
		b := f.lines
		fmt.Fprintf(&sum, "\n==== %s (%d lines", f.name, len(b))
		if len(b) > limit {
			fmt.Fprintf(&sum, ", the last %d", limit)
			b = b[len(b)-limit:]
		}
		sum.WriteString(") ====\n")
		for _, l := range b {
			sum.WriteString(l + "\n")
		}
	}
	if _, err := bw.WriteString(sum.String()); err != nil {
		return err
	}
	return bw.Flush()
}

// topLevel returns the test name after prefix when it names a top-level
// test (no subtest part), with the duration after it dropped.
func topLevel(line, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, " ")
	if name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}
