//go:build e2e

package e2e

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// displayFunction is the bash kernel's way of showing an image, defined in
// every notebook shell as bash_kernel defines it: `display < plot.png` saves
// the image to a file and prints a line naming it, which the kernel (here:
// cellOutputs) turns into a display_data output.
const displayFunction = `display() {
	local f
	f=$(mktemp "${TMPDIR:-/tmp}/bash_kernel.XXXXXXXXXX") || return 1
	cat >"$f"
	echo "bash_kernel: saved image data to: $f" >&2
}
`

var savedImage = regexp.MustCompile(`(?m)^bash_kernel: saved image data to: (\S+)\n?`)

// cellOutputs is what a cell printed as nbformat outputs: the text as
// stdout streams, each displayed image (PNG or SVG) as display_data in its
// place. An image file that cannot be read stays in the text.
func cellOutputs(out string) []any {
	outputs := []any{}
	for {
		m := savedImage.FindStringSubmatchIndex(out)
		if m == nil {
			break
		}
		data, err := os.ReadFile(out[m[2]:m[3]])
		if err != nil {
			break
		}
		_ = os.Remove(out[m[2]:m[3]])
		outputs = append(outputs, streamOutputs(out[:m[0]])...)
		outputs = append(outputs, imageOutput(data))
		out = out[m[1]:]
	}
	return append(outputs, streamOutputs(out)...)
}

func imageOutput(data []byte) map[string]any {
	mime := http.DetectContentType(data)
	bundle := map[string]any{"text/plain": []any{"<image>"}}
	if strings.HasPrefix(mime, "image/png") {
		bundle["image/png"] = base64.StdEncoding.EncodeToString(data)
	} else {
		bundle["image/svg+xml"] = strings.SplitAfter(string(data), "\n")
	}
	return map[string]any{"output_type": "display_data", "data": bundle, "metadata": map[string]any{}}
}

// TestNotebookDisplay runs `display < image` in a notebook shell: the
// image becomes a display_data output between the text printed before and
// after it, and its temporary file is gone.
func TestNotebookDisplay(t *testing.T) {
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 16)...)
	if err := os.WriteFile(filepath.Join(dir, "plot.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	sh, err := startShell(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.close()
	out, err := sh.run("export TMPDIR="+dir+"\necho before; display < plot.png; echo after", 10*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := cellOutputs(out)
	want := []any{
		map[string]any{"name": "stdout", "output_type": "stream", "text": []any{"before\n"}},
		map[string]any{"output_type": "display_data", "metadata": map[string]any{},
			"data": map[string]any{"image/png": base64.StdEncoding.EncodeToString(png), "text/plain": []any{"<image>"}}},
		map[string]any{"name": "stdout", "output_type": "stream", "text": []any{"after\n"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs %#v, want %#v", got, want)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "bash_kernel.*"))
	if len(left) != 0 {
		t.Errorf("the image's temporary file is left: %v", left)
	}
}
