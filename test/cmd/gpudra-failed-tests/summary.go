package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// maxLines is the most lines of one failed test printed again: its last ones,
// where the failure and what was cleaned up after it are.
const maxLines = 400

// failure is a failed top-level test: its lines, and where in them each of
// its subtests starts (its "=== RUN"; it runs to the next one), in order.
type failure struct {
	name       string
	lines      []string
	subs       []subtest
	failedSubs []string
}

type subtest struct {
	name  string
	start int
}

// subLines are the lines of f's i-th subtest.
func (f *failure) subLines(i int) []string {
	end := len(f.lines)
	if i+1 < len(f.subs) {
		end = f.subs[i+1].start
	}
	return f.lines[f.subs[i].start:end]
}

// subVerdict is a subtest's "--- FAIL" line, which go test -v prints
// indented after its top-level test's own verdict.
var subVerdict = regexp.MustCompile(`^\s+--- FAIL: (\S+/\S+)`)

// copyAndSummarize copies r to w line by line, keeping the lines of the
// running top-level test, then writes the kept lines of each failed
// top-level test again (at most limit lines each, the last ones). Of a test
// whose subtests failed, only those subtests' lines are written: the last
// lines of a long parent (the notebooks) are those of the subtests that ran
// after the failed one. The failures come latest first, so that the
// earliest, most often the cause of the others, ends the output: CI shows
// only its tail.
func copyAndSummarize(r io.Reader, w io.Writer, limit int) error {
	bw := bufio.NewWriter(w)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	var (
		cur    *failure // the running top-level test
		failed []*failure
		last   *failure // the last test that ended failed
	)
	for sc.Scan() {
		line := sc.Text()
		if _, err := bw.WriteString(line + "\n"); err != nil {
			return err
		}
		if name, ok := topLevel(line, "=== RUN   "); ok {
			cur, last = &failure{name: name}, nil
		}
		if m := subVerdict.FindStringSubmatch(line); m != nil && last != nil && strings.HasPrefix(m[1], last.name+"/") {
			last.failedSubs = append(last.failedSubs, m[1])
		}
		if cur != nil {
			if name, ok := strings.CutPrefix(line, "=== RUN   "); ok && strings.HasPrefix(name, cur.name+"/") {
				cur.subs = append(cur.subs, subtest{strings.TrimSpace(name), len(cur.lines)})
			}
			cur.lines = append(cur.lines, line)
		}
		for _, verdict := range []string{"--- FAIL: ", "--- PASS: ", "--- SKIP: "} {
			name, ok := topLevel(line, verdict)
			if !ok || cur == nil || name != cur.name {
				continue
			}
			if verdict == "--- FAIL: " {
				failed = append(failed, cur)
				last = cur
			}
			cur = nil
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the test output: %w", err)
	}
	if cur != nil { // a test that never ended: a panic or the -timeout
		failed = append(failed, cur)
	}
	var sum strings.Builder
	if len(failed) > 0 {
		names := make([]string, len(failed))
		for i, f := range failed {
			names[i] = f.name
		}
		fmt.Fprintf(&sum, "\n==== %d failed test(s): %s; their output again, the earliest last ====\n", len(failed), strings.Join(names, ", "))
	}
	for _, f := range slices.Backward(failed) {
		if len(f.failedSubs) == 0 {
			writeBlock(&sum, f.name, f.lines, limit)
			continue
		}
		for i, s := range f.subs {
			if slices.Contains(f.failedSubs, s.name) {
				writeBlock(&sum, s.name, f.subLines(i), limit)
			}
		}
	}
	if _, err := bw.WriteString(sum.String()); err != nil {
		return err
	}
	return bw.Flush()
}

// writeBlock writes a test's lines under a header, at most limit of them
// (the last ones).
func writeBlock(sum *strings.Builder, name string, b []string, limit int) {
	fmt.Fprintf(sum, "\n==== %s (%d lines", name, len(b))
	if len(b) > limit {
		fmt.Fprintf(sum, ", the last %d", limit)
		b = b[len(b)-limit:]
	}
	sum.WriteString(") ====\n")
	for _, l := range b {
		sum.WriteString(l + "\n")
	}
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
