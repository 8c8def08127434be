// Package doclinks checks the relative links of the repository's Markdown
// files: every [text](path) names a file or directory that exists, and every
// [text](path#anchor) into a Markdown file names a heading of that file
// (GitHub's anchor rules). test/cmd/gpudra-doclinks runs it; make lint calls
// that (make doclinks).
package doclinks

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Link is one Markdown link found in a file.
type Link struct {
	Line   int
	Target string // as written, without a title
}

var (
	// [text](target "title"); the text may hold one level of brackets.
	linkRE = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// inline code spans: ``...`` or `...`
	codeRE    = regexp.MustCompile("``[^`]*(?:`[^`]+)*``|`[^`]*`")
	headingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlIDRE  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	fenceRE   = regexp.MustCompile("^ {0,3}(```+|~~~+)")
)

// Scan returns the links and the heading anchors of a Markdown document.
// Fenced code blocks and inline code are skipped.
func Scan(text string) (links []Link, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1][:1]
			case strings.HasPrefix(m[1], fence):
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := Slug(m[1])
			if k := seen[s]; k > 0 {
				anchors[s+"-"+strconv.Itoa(k)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			links = append(links, Link{Line: n, Target: m[1]})
		}
	}
	return links, anchors
}

var inlineLinkRE = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)

// Slug is GitHub's anchor for a heading: the text of links kept, lower
// case, every character but letters, digits, spaces, '-' and '_' dropped,
// spaces turned into '-'.
func Slug(heading string) string {
	heading = inlineLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// external says whether a target leaves the repository (a URL scheme).
func external(target string) bool {
	i := strings.Index(target, ":")
	return i > 0 && !strings.ContainsAny(target[:i], "/#.")
}

// Check checks the links of the Markdown files under root (directories
// named _output or starting with a dot are skipped) and returns one line per
// broken link, "file:line: target: why", sorted.
func Check(root string) ([]string, error) {
	type doc struct {
		links   []Link
		anchors map[string]bool
	}
	docs := map[string]*doc{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "_output" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".md") {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		l, a := Scan(string(text))
		docs[p] = &doc{l, a}
		return nil
	})
	if err != nil {
		return nil, err
	}
	anchorsOf := func(p string) (map[string]bool, error) {
		if d, ok := docs[p]; ok {
			return d.anchors, nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		_, a := Scan(string(text))
		return a, nil
	}
	var bad []string
	for p, d := range docs {
		rel, _ := filepath.Rel(root, p)
		for _, l := range d.links {
			if external(l.Target) {
				continue
			}
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := p
			if path != "" {
				if strings.HasPrefix(path, "/") {
					target = filepath.Join(root, path)
				} else {
					target = filepath.Join(filepath.Dir(p), path)
				}
				if _, err := os.Stat(target); err != nil {
					bad = append(bad, fmt.Sprintf("%s:%d: %s: no such file or directory", rel, l.Line, l.Target))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			anchors, err := anchorsOf(target)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %v", rel, l.Line, l.Target, err))
				continue
			}
			if !anchors[anchor] {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: no heading with anchor #%s", rel, l.Line, l.Target, anchor))
			}
		}
	}
	sort.Strings(bad)
	return bad, nil
}
