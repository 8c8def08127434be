package doclinks

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Install on a cluster", "install-on-a-cluster"},
		{"Cluster GPU view: `gpudra status`", "cluster-gpu-view-gpudra-status"},
		{"Simulated GPUs: the production code path on a fake driver root", "simulated-gpus-the-production-code-path-on-a-fake-driver-root"},
		{"NVIDIA compatibility mode and migration", "nvidia-compatibility-mode-and-migration"},
		{"Device attributes (CEL)", "device-attributes-cel"},
		{"kill -9 at each fail_point", "kill--9-at-each-fail_point"},
		{"Start → slice", "start--slice"},
		{"See [MIG](mig.md) here", "see-mig-here"},
		{"Ünïcode Überall", "ünïcode-überall"},
	} {
		if got := Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		links      []string
		anchors    []string
	}{
		{name: "plain and anchored links", text: "see [a](docs/a.md) and [b](b.md#x \"title\")\n",
			links: []string{"docs/a.md", "b.md#x"}},
		{name: "link text with code and brackets", text: "[`06-mig`](demo/notebooks/06-mig.ipynb), [x [y]](z.md)\n",
			links: []string{"demo/notebooks/06-mig.ipynb", "z.md"}},
		{name: "inline code is not a link", text: "`[a](nope.md)` but [b](yes.md)\n", links: []string{"yes.md"}},
		{name: "fenced code is skipped", text: "```\n[a](nope.md)\n# not a heading\n```\n# Real\n",
			anchors: []string{"real"}},
		{name: "tilde fence holding backticks", text: "~~~\n```\n[a](nope.md)\n~~~\n[b](yes.md)\n", links: []string{"yes.md"}},
		{name: "URLs and anchors", text: "[u](https://example.com/x) [s](#top) [m](mailto:a@b)\n",
			links: []string{"https://example.com/x", "#top", "mailto:a@b"}},
		{name: "duplicate headings", text: "## Try it\n## Try it\n### Try it\n", anchors: []string{"try-it", "try-it-1", "try-it-2"}},
		{name: "html anchor", text: "<a name=\"custom\"></a>\n", anchors: []string{"custom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links, anchors := Scan(tc.text)
			var got []string
			for _, l := range links {
				got = append(got, l.Target)
			}
			if !reflect.DeepEqual(got, tc.links) {
				t.Errorf("links = %q, want %q", got, tc.links)
			}
			for _, a := range tc.anchors {
				if !anchors[a] {
					t.Errorf("anchor %q missing in %v", a, anchors)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	write := func(p, text string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n[ok](docs/a.md#section-one) [dir](docs/) [self](#top) [url](https://x.y/z)\n"+
		"[gone](docs/gone.md) [bad anchor](docs/a.md#nope) [self bad](#nowhere) [nb](demo/n.ipynb#cell)\n")
	write("docs/a.md", "## Section one\n[up](../README.md#top) [sibling](design/b.md)\n")
	write("docs/design/b.md", "[back](../a.md#section-one) [wrong](../../README.md#section-one)\n")
	write("demo/n.ipynb", "{}")
	write("_output/x.md", "[ignored](nowhere.md)\n")
	bad, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:3: #nowhere: no heading with anchor #nowhere",
		"README.md:3: docs/a.md#nope: no heading with anchor #nope",
		"README.md:3: docs/gone.md: no such file or directory",
		"docs/design/b.md:1: ../../README.md#section-one: no heading with anchor #section-one",
	}
	if !reflect.DeepEqual(bad, want) {
		t.Errorf("Check =\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
