package images

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, from this package's directory.
const repoRoot = "../.."

func TestShellWords(t *testing.T) {
	for in, want := range map[string][]string{
		`go build -trimpath -ldflags="-s -w" -o bin/ ./cmd/a`: {"go", "build", "-trimpath", "-ldflags=-s -w", "-o", "bin/", "./cmd/a"},
		`A='x y'  B="a\"b\\c" C=d\ e`:                         {"A=x y", `B=a"b\c`, "C=d e"},
		`a && b`:                                              {"a", "&&", "b"},
		``:                                                    nil,
	} {
		got, err := shellWords(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{`a 'b`, `"c`} {
		_, err := shellWords(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseDockerfile(t *testing.T) {
	const good = `# syntax=docker/dockerfile:1
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12

FROM ${GO_IMAGE} AS build
ENV CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations"
RUN --mount=type=cache,target=/go/pkg/mod \
    go build -trimpath -ldflags="-s -w" -o bin/ ./cmd/a ./cmd/b && echo done
RUN go build -o other ./cmd/c

FROM ${BASE_IMAGE}
COPY --from=build /src/bin/a /src/bin/b /usr/local/bin/
COPY --from=build --chown=1:1 /src/etc/x /etc/y
ENV TZ=UTC
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/b"]
CMD ["--help"]
`
	d, err := parseDockerfileText(t, good)
	require.NoError(t, err)
	assert.Equal(t, &Dockerfile{
		Base: "gcr.io/distroless/base-debian12",
		Copies: []Copy{
			{From: "build", Sources: []string{"/src/bin/a", "/src/bin/b"}, Files: []string{"/usr/local/bin/a", "/usr/local/bin/b"}},
			{From: "build", Chown: "1:1", Sources: []string{"/src/etc/x"}, Files: []string{"/etc/y"}},
		},
		User: "65532:65532", Entrypoint: []string{"/usr/local/bin/b"}, Cmd: []string{"--help"}, Env: []string{"TZ=UTC"},
		Build: BuildStage{Name: "build", Env: []string{"CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations"},
			GoBuild: []string{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", "bin/", "./cmd/a", "./cmd/b", "&&", "echo", "done"}},
	}, d)
	b, err := GoBuildOf(d)
	require.NoError(t, err)
	assert.Equal(t, GoBuild{CGOEnabled: "1", Trimpath: true, LDFlags: "-s -w"}, b)
	assert.Equal(t, []string{"./cmd/a", "./cmd/b"}, GoBuildPackages(d.Build.GoBuild))

	for name, tc := range map[string]struct{ text, want string }{
		"no FROM":          {"ARG A=1\n", "no FROM"},
		"before FROM":      {"RUN true\nFROM x\n", "RUN before the first FROM"},
		"unmodelled":       {"FROM a AS build\nRUN go build .\nFROM b\nCOPY --from=build /x /y\nVOLUME /data\n", "does not model VOLUME"},
		"shell entrypoint": {"FROM a AS build\nRUN go build .\nFROM b\nCOPY --from=build /x /y\nENTRYPOINT /y\n", "ENTRYPOINT /y"},
		"no COPY --from":   {"FROM b\nCOPY x /y\n", "no --from"},
		"no go build":      {"FROM a AS build\nRUN make\nFROM b\nCOPY --from=build /x /y\n", `stage "build" has no RUN with go build`},
		"relative dest":    {"FROM a AS build\nRUN go build .\nFROM b\nCOPY --from=build /x y\n", "not absolute"},
	} {
		_, err := parseDockerfileText(t, tc.text)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func parseDockerfileText(t *testing.T, text string) (*Dockerfile, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "Dockerfile")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return ParseDockerfile(p)
}

var debianBaseRE = regexp.MustCompile(`-debian([0-9]+)(:|$)`)

// TestDockerfileMatchesGpudraImage is the drift check between the
// repository's Dockerfile and GpudraSpec: what the final stage copies,
// USER, ENTRYPOINT, CMD and ENV, how the build stage builds the binaries,
// and the base image's Debian release against this machine's, whose C
// library the gpudra image takes.
func TestDockerfileMatchesGpudraImage(t *testing.T) {
	d, err := ParseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)

	assert.Empty(t, Drift(d), "the Dockerfile and GpudraSpec (GpudraBinaries, GpudraConfig, GpudraGoBuild) differ: change both")

	m := debianBaseRE.FindStringSubmatch(d.Base)
	require.NotNil(t, m, "BASE_IMAGE %s names no Debian release (-debianNN)", d.Base)
	id, version := osRelease(t, "/etc/os-release")
	if id != "debian" {
		t.Skipf("this machine runs %s, not Debian: the gpudra image's C library would not be the base image's", id)
	}
	assert.Equal(t, m[1], version, "the Dockerfile's base is Debian %s, this machine (whose glibc the image takes) Debian %s", m[1], version)
}

func osRelease(t *testing.T, p string) (id, version string) {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	require.NoError(t, sc.Err())
	return id, version
}

// TestDockerfileDriftDetected: the check notices a changed Dockerfile.
func TestDockerfileDriftDetected(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	for name, edit := range map[string]func(string) string{
		"user": func(s string) string { return strings.Replace(s, "USER 65532:65532", "USER 1000:1000", 1) },
		"entrypoint": func(s string) string {
			return strings.Replace(s, `ENTRYPOINT ["/usr/local/bin/gpu-controller"]`, `ENTRYPOINT ["/x"]`, 1)
		},
		"ldflags": func(s string) string { return strings.Replace(s, `-ldflags="-s -w"`, `-ldflags="-s"`, 1) },
		"copy":    func(s string) string { return strings.Replace(s, " /usr/local/bin/\n", " /bin/\n", 1) },
		"hook not built": func(s string) string {
			return strings.Replace(s, "hack/build-cdi-hook.sh bin", "true", 1)
		},
	} {
		changed := edit(string(data))
		require.NotEqual(t, string(data), changed, "%s: the edit no longer applies to the Dockerfile", name)
		d, err := parseDockerfileText(t, changed)
		require.NoError(t, err, name)
		assert.Len(t, Drift(d), 1, "%s: %v", name, Drift(d))
	}
}
