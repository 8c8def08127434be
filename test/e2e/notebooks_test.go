//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The notebooks of demo/notebooks are executed here the way Jupyter's
// bash_kernel would run them: every code cell, in order, in one bash process
// per notebook (so variables and exports carry over between cells). A cell
// fails when any command in it fails (an ERR trap, like `set -e` but without
// leaving the shell) or when it runs longer than cellTimeout.
//
// With -update-notebooks (or NOTEBOOKS_UPDATE=1) the captured outputs are
// written back into the .ipynb files (`make notebooks`).

var updateNotebooks = flag.Bool("update-notebooks", false, "write the cell outputs of demo/notebooks/*.ipynb back into the files")

const cellTimeout = 3 * time.Minute

// notebookLabel marks the namespaces the notebooks create.
const notebookLabel = "gpudra.io/notebook"

func TestNotebooks(t *testing.T) {
	keepFailure(t)
	paths, err := filepath.Glob(filepath.Join(repoRoot, "demo", "notebooks", "*.ipynb"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no notebooks in demo/notebooks (%v)", err)
	}
	sort.Strings(paths)
	update := *updateNotebooks || os.Getenv("NOTEBOOKS_UPDATE") == "1"
	// 05-cleanup deletes what the notebooks create; this catches what a
	// failed or skipped notebook left, so later tests find the GPUs free.
	// A notebook that adds a node (07-sharing) removes it in its last
	// cell; one that failed before that left it, and later tests would
	// find an extra GPU node: remove what the notebooks added.
	before := nodeNames()
	t.Cleanup(func() {
		if out, err := kubectl("delete", "namespaces", "-l", notebookLabel, "--wait", "--timeout=150s"); err != nil {
			t.Errorf("delete the notebooks' namespaces: %v\n%s", err, out)
		}
		for _, n := range nodeNames() {
			if !slices.Contains(before, n) {
				t.Logf("removing node %s, which a notebook added and left", n)
				clusterCmd(t, "remove-node", n)
			}
		}
	})
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".ipynb"), func(t *testing.T) {
			runNotebook(t, path, update)
		})
	}
}

// nodeNames are the local cluster's nodes as it records them.
func nodeNames() []string {
	var names []string
	for _, n := range realCluster.Config().Nodes {
		names = append(names, n.Name)
	}
	return names
}

func runNotebook(t *testing.T, path string, update bool) {
	nb, err := readNotebook(path)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := startShell(filepath.Dir(path), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.close()
	count := 0
	for i, cell := range nb.cells() {
		if cell["cell_type"] != "code" {
			continue
		}
		count++
		src := joinText(cell["source"])
		start := time.Now()
		out, err := sh.run(src, cellTimeout)
		if err != nil {
			t.Fatalf("%s: cell %d (code cell %d) %v after %.1fs\n--- source\n%s\n--- output\n%s",
				filepath.Base(path), i, count, err, time.Since(start).Seconds(), src, out)
		}
		t.Logf("cell %d: ok in %.1fs", i, time.Since(start).Seconds())
		cell["execution_count"] = count
		cell["outputs"] = cellOutputs(out)
	}
	if update {
		if err := nb.write(path); err != nil {
			t.Fatal(err)
		}
		t.Logf("outputs written to %s", path)
	}
}

// notebook is an .ipynb document kept as generic JSON, so that fields this
// runner does not know survive a rewrite unchanged.
type notebook map[string]any

func readNotebook(path string) (notebook, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keep nbformat/nbformat_minor and counts as written
	var nb notebook
	if err := dec.Decode(&nb); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if v, _ := nb["nbformat"].(json.Number); v != "4" {
		return nil, fmt.Errorf("%s: nbformat %v, want 4", path, nb["nbformat"])
	}
	return nb, nil
}

func (nb notebook) cells() []map[string]any {
	raw, _ := nb["cells"].([]any)
	cells := make([]map[string]any, 0, len(raw))
	for _, c := range raw {
		if m, ok := c.(map[string]any); ok {
			cells = append(cells, m)
		}
	}
	return cells
}

// write saves the notebook as Jupyter does (nbformat's writer): keys sorted,
// one-space indent, non-ASCII and <>& unescaped, a final newline. A notebook
// saved by Jupyter and rewritten here therefore only differs in its outputs.
func (nb notebook) write(path string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(map[string]any(nb)); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// joinText reads a multiline field: a string or a list of lines.
func joinText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, l := range v {
			s, _ := l.(string)
			b.WriteString(s)
		}
		return b.String()
	}
	return ""
}

// streamOutputs is a cell's captured text as one stdout stream output, split
// into lines the way nbformat stores multiline strings.
func streamOutputs(out string) []any {
	if out == "" {
		return []any{}
	}
	lines := strings.SplitAfter(out, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	text := make([]any, len(lines))
	for i, l := range lines {
		text[i] = l
	}
	return []any{map[string]any{"name": "stdout", "output_type": "stream", "text": text}}
}

// shell is one bash process that runs cells sent on its stdin; stdout and
// stderr share one pipe, read by a goroutine into chunks.
type shell struct {
	cmd    *exec.Cmd
	stdin  *os.File
	chunks chan []byte
	buf    []byte
	marker string
	tmp    string
	n      int
}

// preamble makes the shell fail a cell on the first failing command: the ERR
// trap (inherited by functions and subshells) records it and names it.
const preamble = `set -o pipefail -o errtrace
__nb_fail=0
trap '__nb_rc=$?; if [ "$__nb_fail" = 0 ]; then __nb_fail=$__nb_rc; printf "!! exit %s: %s\n" "$__nb_rc" "$BASH_COMMAND" >&2; fi' ERR
`

func startShell(dir, tmp string) (*shell, error) {
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	sh := &shell{marker: "__gpudra_notebook_cell_done_" + hex.EncodeToString(token), tmp: tmp, chunks: make(chan []byte, 64)}
	sh.cmd = exec.Command("bash", "--noprofile", "--norc")
	sh.cmd.Dir = dir
	// The suite's cluster, whatever KUBECONFIG the caller had: the notebooks
	// only fall back to the local cluster when KUBECONFIG is unset.
	sh.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	sh.cmd.Stdin, sh.cmd.Stdout, sh.cmd.Stderr = inR, outW, outW
	err = sh.cmd.Start()
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		return nil, err
	}
	sh.stdin = inW
	go func() {
		defer close(sh.chunks)
		defer outR.Close()
		for {
			b := make([]byte, 32<<10)
			n, err := outR.Read(b)
			if n > 0 {
				sh.chunks <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	if _, err := sh.stdin.WriteString(preamble + displayFunction); err != nil {
		sh.close()
		return nil, err
	}
	return sh, nil
}

// run executes one cell and returns what it printed. The cell is sourced
// from a file (so any syntax works and its stdin is /dev/null, never the
// command stream), then a marker line carries its exit status.
func (sh *shell) run(src string, timeout time.Duration) (string, error) {
	sh.n++
	file := filepath.Join(sh.tmp, fmt.Sprintf("cell-%d.sh", sh.n))
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		return "", err
	}
	cmd := fmt.Sprintf("__nb_fail=0; source %s </dev/null; __nb_rc=$?; printf '\\n%s %%s %%s\\n' \"$__nb_rc\" \"$__nb_fail\"\n",
		strconv.Quote(file), sh.marker)
	if _, err := sh.stdin.WriteString(cmd); err != nil {
		return "", fmt.Errorf("the shell is gone: %w", err)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tag := []byte("\n" + sh.marker + " ")
	for {
		if i := bytes.Index(sh.buf, tag); i >= 0 {
			if j := bytes.IndexByte(sh.buf[i+len(tag):], '\n'); j >= 0 {
				out := string(sh.buf[:i])
				status := strings.Fields(string(sh.buf[i+len(tag) : i+len(tag)+j]))
				sh.buf = append([]byte(nil), sh.buf[i+len(tag)+j+1:]...)
				for _, s := range status {
					if s != "0" {
						return out, fmt.Errorf("failed (exit %s)", s)
					}
				}
				return out, nil
			}
		}
		select {
		case b, ok := <-sh.chunks:
			if !ok {
				return string(sh.buf), errors.New("ended the shell (exit?)")
			}
			sh.buf = append(sh.buf, b...)
		case <-deadline.C:
			sh.kill()
			return string(sh.buf), fmt.Errorf("timed out (%v)", timeout)
		}
	}
}

// close ends the shell and whatever a cell left running in the background.
func (sh *shell) close() {
	_ = sh.stdin.Close()
	done := make(chan struct{})
	go func() { _ = sh.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	sh.kill()
	<-done
	go func() {
		for range sh.chunks { // until the last writer is gone
		}
	}()
}

func (sh *shell) kill() {
	if sh.cmd.Process != nil {
		_ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// TestNotebookShell checks the runner itself, without the cluster: state
// carries over between cells, any failing command fails its cell, and a
// cell that hangs is stopped.
func TestNotebookShell(t *testing.T) {
	keepFailure(t)
	sh, err := startShell(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.close()
	for i, c := range []struct {
		src, want string
		fail      bool
		timeout   time.Duration
	}{
		{src: "export A=1\nb=2"},
		{src: "echo $A$b; printf 'no newline'", want: "12\nno newline"},
		{src: "false\necho still runs", want: "!! exit 1: false\nstill runs\n", fail: true},
		{src: "echo x | grep -q y", want: "!! exit 1: grep -q y\n", fail: true},
		{src: "if false; then :; fi; false || true; ! false; cat", want: ""}, // cat reads /dev/null
		{src: "sleep 10", timeout: 300 * time.Millisecond, fail: true},
	} {
		timeout := c.timeout
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		out, err := sh.run(c.src, timeout)
		if out != c.want || (err != nil) != c.fail {
			t.Errorf("cell %d %q: output %q, error %v; want %q, failure %v", i, c.src, out, err, c.want, c.fail)
		}
	}
}
