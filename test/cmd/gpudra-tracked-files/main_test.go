package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		head []byte
		want string
	}{
		{"text", []byte("package main\n"), ""},
		{"empty", nil, ""},
		{"shell script", []byte("#!/usr/bin/env bash\necho hi\n"), ""},
		{"UTF-8", []byte("GPU — 80 GiB\n"), ""},
		{"ELF", []byte("\x7fELF\x02\x01\x01\x00\x00"), "an ELF program or library"},
		{"Mach-O 64", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, "a Mach-O program"},
		{"Mach-O fat", []byte{0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2}, "a Mach-O program"},
		{"PE", []byte("MZ\x90\x00\x03\x00\x00\x00"), "a PE (Windows) program"},
		{"MZ text", []byte("MZ is a text file's first word\n"), ""},
		{"NUL bytes", []byte("gzip?\x1f\x8b\x08\x00"), "a binary file (NUL bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kind(tc.head); got != tc.want {
				t.Errorf("kind = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseAllowlist(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []allowed
		wantErr    string
	}{
		{name: "comments", text: "# x\n\n   # y\n"},
		{name: "path and glob", text: "docs/big.svg  the architecture picture, drawn by hand\ntestdata/*.bin\tfuzz corpus of the decoder\n",
			want: []allowed{{"docs/big.svg", "the architecture picture, drawn by hand", 1}, {"testdata/*.bin", "fuzz corpus of the decoder", 2}}},
		{name: "no reason", text: "# c\nbin/tool\n", wantErr: `allow:2: "bin/tool" has no reason`},
		{name: "bad glob", text: "a[ why\n", wantErr: `allow:1: bad pattern "a["`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAllowlist(strings.NewReader(tc.text), "allow")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	elf := []byte("\x7fELF\x02\x01")
	for _, tc := range []struct {
		name  string
		files []file
		allow []allowed
		want  []string
	}{
		{name: "source only", files: []file{{"main.go", 100, []byte("package main")}, {"README.md", 300 << 10, []byte("# x")}}},
		{name: "a committed program", files: []file{{"gpudra-cluster", 90 << 20, elf}, {"main.go", 10, []byte("package main")}},
			want: []string{"gpudra-cluster: an ELF program or library, 92160 KiB, over 300 KiB"}},
		{name: "one byte over", files: []file{{"notes.md", 300<<10 + 1, []byte("# x")}},
			want: []string{"notes.md: 300 KiB, over 300 KiB"}},
		{name: "allowed by path and by glob", files: []file{{"big.json", 1 << 20, []byte("{")}, {"testdata/a.bin", 10, []byte{0}}},
			allow: []allowed{{"big.json", "why", 1}, {"testdata/*.bin", "why", 2}}},
		{name: "a stale entry", files: []file{{"small.json", 10, []byte("{")}},
			allow: []allowed{{"small.json", "it was big once", 3}},
			want:  []string{"allow:3: small.json matches no tracked file that is binary or large: remove the line"}},
		{name: "a glob does not cross directories", files: []file{{"testdata/sub/a.bin", 10, []byte{0}}},
			allow: []allowed{{"testdata/*.bin", "why", 1}},
			want:  []string{"testdata/sub/a.bin: a binary file (NUL bytes)", "allow:1: testdata/*.bin matches no tracked file that is binary or large: remove the line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := check(tc.files, tc.allow, 300<<10, "allow"); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The command in a scratch repository: a committed program fails it until
// the allowlist gives the reason.
func TestRunInRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("main.go", "package main\n")
	write("tool", "\x7fELF\x02\x01\x01\x00")
	write("allow.txt", "# none\n")
	git("add", "main.go", "tool", "allow.txt")
	t.Chdir(dir)

	var stdout, stderr bytes.Buffer
	if rc := run([]string{"--allowlist=allow.txt"}, &stdout, &stderr); rc != 1 || !strings.Contains(stderr.String(), "tool: an ELF program or library\n") {
		t.Fatalf("rc %d, stderr:\n%s", rc, stderr.String())
	}
	write("allow.txt", "tool  a test's fixture\n")
	stdout.Reset()
	stderr.Reset()
	if rc := run([]string{"--allowlist=allow.txt"}, &stdout, &stderr); rc != 0 || !strings.Contains(stdout.String(), "3 tracked files") {
		t.Fatalf("rc %d, stdout %q, stderr:\n%s", rc, stdout.String(), stderr.String())
	}
}
