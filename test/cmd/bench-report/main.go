// Command bench-report writes the performance report (report.md and
// report.json) from the `go test -bench` outputs that `make bench-report`
// collects, and performance.md, the page make bench-docs copies to
// docs/performance.md (machine, figures; no commit or load averages).
//
//	bench-report -out _output/bench -machine cpu=... _output/bench/*.txt
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpudra/gpudra/test/bench"
)

func main() {
	out := flag.String("out", "_output/bench", "directory for report.md, report.json and performance.md")
	var machine []string
	flag.Func("machine", "key=value describing the machine (repeatable)", func(s string) error {
		machine = append(machine, s)
		return nil
	})
	flag.Parse()
	if err := run(*out, machine, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "bench-report:", err)
		os.Exit(1)
	}
}

func run(out string, machine, inputs []string) error {
	res := bench.Results{}
	for _, in := range inputs {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		err = bench.Parse(f, res)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
	}
	r := bench.Report{Machine: map[string]string{}, SideBySide: bench.BuildSideBySide(res), Rows: bench.Build(res), Raw: res}
	for _, kv := range machine {
		k, v, _ := strings.Cut(kv, "=")
		r.Machine[k] = v
	}
	for name, write := range map[string]func(*os.File) error{
		"report.md":   func(f *os.File) error { return r.WriteMarkdown(f) },
		"report.json": func(f *os.File) error { return r.WriteJSON(f) },
		// performance.md: make bench-docs copies it to docs/performance.md.
		"performance.md": func(f *os.File) error { return r.WriteDocs(f) },
	} {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
