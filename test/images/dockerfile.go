package images

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Dockerfile is the part of a Dockerfile that the gpudra image must match:
// the final stage's content and configuration and the build stage's Go
// build. Only the forms the project's Dockerfile uses are understood.
type Dockerfile struct {
	// Base is the final stage's FROM, with ARG defaults substituted.
	Base string
	// Copies are the final stage's COPY instructions.
	Copies []Copy
	User   string
	// Entrypoint and Cmd are the JSON (exec) forms; nil when absent.
	Entrypoint, Cmd []string
	// Env are the final stage's ENV pairs, KEY=value.
	Env []string
	// Build is the stage the final one copies from.
	Build BuildStage
}

// Copy is a COPY instruction of the final stage.
type Copy struct {
	From string // --from
	// Chown and Chmod are the flags' values, "" when absent.
	Chown, Chmod string
	Sources      []string
	// Files are the image paths the sources land at.
	Files []string
}

// BuildStage is what the build stage says about how the binaries are built.
type BuildStage struct {
	Name string
	// Env are the stage's ENV pairs, KEY=value.
	Env []string
	// GoBuild is the words of the RUN command's go build, from "go".
	GoBuild []string
	// Scripts are the first words of the stage's RUN commands that run a
	// script of the repository (hack/...).
	Scripts []string
}

var fromRE = regexp.MustCompile(`(?i)^(\S+)(?:\s+as\s+(\S+))?$`)

// ParseDockerfile reads the Dockerfile at p.
func ParseDockerfile(p string) (*Dockerfile, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	type instruction struct{ keyword, rest string }
	type stage struct {
		name, from string
		ins        []instruction
	}
	args := map[string]string{}
	var stages []*stage
	for _, line := range logicalLines(string(data)) {
		keyword, rest, _ := strings.Cut(line, " ")
		keyword, rest = strings.ToUpper(keyword), strings.TrimSpace(rest)
		switch {
		case keyword == "FROM":
			m := fromRE.FindStringSubmatch(rest)
			if m == nil {
				return nil, fmt.Errorf("%s: FROM %q: want FROM <image> [AS <name>]", p, rest)
			}
			stages = append(stages, &stage{name: m[2], from: expandArgs(m[1], args)})
		case keyword == "ARG" && len(stages) == 0:
			name, value, _ := strings.Cut(rest, "=")
			args[name] = value
		case len(stages) == 0:
			return nil, fmt.Errorf("%s: %s before the first FROM", p, keyword)
		default:
			s := stages[len(stages)-1]
			s.ins = append(s.ins, instruction{keyword, rest})
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", p)
	}
	final := stages[len(stages)-1]
	d := &Dockerfile{Base: final.from}
	for _, in := range final.ins {
		var err error
		switch in.keyword {
		case "COPY":
			var c Copy
			c, err = parseCopy(in.rest)
			d.Copies = append(d.Copies, c)
		case "USER":
			d.User = in.rest
		case "ENTRYPOINT":
			err = json.Unmarshal([]byte(in.rest), &d.Entrypoint)
		case "CMD":
			err = json.Unmarshal([]byte(in.rest), &d.Cmd)
		case "ENV":
			d.Env, err = envPairs(in.rest)
		case "LABEL", "ARG", "EXPOSE":
		default:
			err = fmt.Errorf("the gpudra image's spec does not model %s", in.keyword)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: final stage: %s %s: %w", p, in.keyword, in.rest, err)
		}
	}
	if len(d.Copies) == 0 || d.Copies[0].From == "" {
		return nil, fmt.Errorf("%s: the final stage's first COPY has no --from=<build stage>", p)
	}
	d.Build.Name = d.Copies[0].From
	for _, s := range stages {
		if s.name != d.Build.Name {
			continue
		}
		for _, in := range s.ins {
			switch in.keyword {
			case "ENV":
				env, err := envPairs(in.rest)
				if err != nil {
					return nil, fmt.Errorf("%s: stage %s: ENV: %w", p, s.name, err)
				}
				d.Build.Env = append(d.Build.Env, env...)
			case "RUN":
				words, err := shellWords(in.rest)
				if err != nil {
					return nil, fmt.Errorf("%s: stage %s: RUN: %w", p, s.name, err)
				}
				for i := 0; i+1 < len(words); i++ {
					if words[i] == "go" && words[i+1] == "build" && d.Build.GoBuild == nil {
						d.Build.GoBuild = words[i:]
					}
				}
				for len(words) > 0 && strings.HasPrefix(words[0], "--") { // RUN's own flags (--mount=...)
					words = words[1:]
				}
				if len(words) > 0 && strings.HasPrefix(words[0], "hack/") {
					d.Build.Scripts = append(d.Build.Scripts, words[0])
				}
			}
		}
	}
	if d.Build.GoBuild == nil {
		return nil, fmt.Errorf("%s: stage %q has no RUN with go build", p, d.Build.Name)
	}
	return d, nil
}

// logicalLines joins continued lines and drops comments and blank lines.
func logicalLines(data string) []string {
	var out []string
	var buf strings.Builder
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			buf.WriteString(cont + " ")
			continue
		}
		buf.WriteString(line)
		out = append(out, buf.String())
		buf.Reset()
	}
	if buf.Len() > 0 {
		out = append(out, buf.String())
	}
	return out
}

var argRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

func expandArgs(s string, args map[string]string) string {
	return argRE.ReplaceAllStringFunc(s, func(m string) string {
		return args[argRE.FindStringSubmatch(m)[1]]
	})
}

func parseCopy(rest string) (Copy, error) {
	words, err := shellWords(rest)
	if err != nil {
		return Copy{}, err
	}
	var c Copy
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(words[0], "--"), "=")
		switch k {
		case "from":
			c.From = v
		case "chown":
			c.Chown = v
		case "chmod":
			c.Chmod = v
		default:
			return c, fmt.Errorf("COPY flag --%s is not modelled", k)
		}
		words = words[1:]
	}
	if len(words) < 2 {
		return c, fmt.Errorf("want sources and a destination")
	}
	c.Sources, words = words[:len(words)-1], words[len(words)-1:]
	dest := words[0]
	if !path.IsAbs(dest) {
		return c, fmt.Errorf("destination %s is not absolute", dest)
	}
	for _, src := range c.Sources {
		if strings.HasSuffix(dest, "/") || len(c.Sources) > 1 {
			c.Files = append(c.Files, path.Join(dest, path.Base(src)))
		} else {
			c.Files = append(c.Files, dest)
		}
	}
	return c, nil
}

// envPairs splits an ENV instruction's KEY=value pairs.
func envPairs(rest string) ([]string, error) {
	words, err := shellWords(rest)
	if err != nil {
		return nil, err
	}
	for _, w := range words {
		if !strings.Contains(w, "=") {
			return nil, fmt.Errorf("ENV %q: only the KEY=value form is understood", rest)
		}
	}
	return words, nil
}

// shellWords splits s into words as sh does for plain words, single and
// double quotes and backslashes (no expansions). Operators such as && stay
// words of their own when surrounded by spaces.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// Drift lists how the Dockerfile's gpudra image differs from GpudraSpec's
// (files copied, USER, ENTRYPOINT, CMD, ENV, go build settings and
// packages); empty when they agree. The base image's Debian release is
// checked by the tests against the build machine's.
func Drift(d *Dockerfile) []string {
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	var files, sources []string
	for _, c := range d.Copies {
		if c.From != d.Build.Name {
			add("COPY --from=%s: only copies from the build stage %s are modelled", c.From, d.Build.Name)
		}
		if c.Chown != "" || c.Chmod != "" {
			add("COPY %s has --chown/--chmod; GpudraSpec makes root-owned 0755 binaries", strings.Join(c.Sources, " "))
		}
		files = append(files, c.Files...)
		for _, s := range c.Sources {
			sources = append(sources, path.Base(s))
		}
	}
	if want := append(slices.Clone(GpudraBinaries), GpudraCDIHook); !sameSet(files, want) {
		add("the final stage copies %v, GpudraBinaries and GpudraCDIHook are %v", files, want)
	}
	var built []string
	for _, p := range GoBuildPackages(d.Build.GoBuild) {
		built = append(built, path.Base(p))
	}
	if slices.Contains(d.Build.Scripts, CDIHookBuildScript) {
		built = append(built, CDIHookBinary)
	}
	if !sameSet(built, sources) {
		add("go build makes %v, the final stage copies %v", built, sources)
	}
	if d.User != GpudraConfig.User {
		add("USER %s, GpudraConfig.User %s", d.User, GpudraConfig.User)
	}
	if !slices.Equal(d.Entrypoint, GpudraConfig.Entrypoint) {
		add("ENTRYPOINT %q, GpudraConfig.Entrypoint %q", d.Entrypoint, GpudraConfig.Entrypoint)
	}
	if !slices.Equal(d.Cmd, GpudraConfig.Cmd) {
		add("CMD %q, GpudraConfig.Cmd %q", d.Cmd, GpudraConfig.Cmd)
	}
	for _, kv := range d.Env {
		if !slices.Contains(GpudraConfig.Env, kv) {
			add("ENV %s is not in GpudraConfig.Env", kv)
		}
	}
	if b, _ := GoBuildOf(d); b != GpudraGoBuild {
		add("the Dockerfile builds with %s, GpudraGoBuild is %s", b, GpudraGoBuild)
	}
	return diffs
}

// GoBuildPackages are the ./... package arguments of a go build command.
func GoBuildPackages(words []string) []string {
	var pkgs []string
	for _, w := range words[min(2, len(words)):] {
		if w == "&&" || w == ";" || w == "||" {
			break
		}
		if strings.HasPrefix(w, "./") {
			pkgs = append(pkgs, w)
		}
	}
	return pkgs
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
