package sim

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

//go:embed profiles/*.yaml
var profileFiles embed.FS

const profileExt = ".yaml"

// Builtin returns the names of the built-in profiles, sorted.
func Builtin() []string {
	entries, err := profileFiles.ReadDir("profiles")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), profileExt); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Load returns a validated profile. nameOrPath is, in this order of lookup:
//
//   - a path to a profile file, if it contains a path separator or ends in
//     .yaml or .yml;
//   - <name>.yaml in one of extraDirs, searched in order, so that a user
//     profile can replace a built-in one of the same name;
//   - the name of a built-in profile (see Builtin).
//
// A profile file without a name takes its name from the file name.
func Load(nameOrPath string, extraDirs []string) (*Profile, error) {
	if nameOrPath == "" {
		return nil, fmt.Errorf("no simulation profile given: use one of the built-in profiles (%s) or a path to a profile file",
			strings.Join(Builtin(), ", "))
	}
	if strings.ContainsRune(nameOrPath, filepath.Separator) || strings.ContainsRune(nameOrPath, '/') ||
		strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
		return loadFile(nameOrPath)
	}
	if !nameRE.MatchString(nameOrPath) {
		return nil, fmt.Errorf("%q is not a valid simulation profile name: use lower-case letters, digits, '-' and '.', or give a path to a file", nameOrPath)
	}
	for _, dir := range extraDirs {
		file := filepath.Join(dir, nameOrPath+profileExt)
		if _, err := os.Stat(file); err == nil {
			return loadFile(file)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("looking for simulation profile %q in %s: %w", nameOrPath, dir, err)
		}
	}
	data, err := profileFiles.ReadFile("profiles/" + nameOrPath + profileExt)
	if err != nil {
		searched := ""
		if len(extraDirs) > 0 {
			searched = fmt.Sprintf("no %s%s in the profile directories %s, ", nameOrPath, profileExt, strings.Join(extraDirs, ", "))
		}
		return nil, fmt.Errorf("unknown simulation profile %q: %sand not a built-in profile; built-in profiles: %s (or give a path to a profile file)",
			nameOrPath, searched, strings.Join(Builtin(), ", "))
	}
	p, err := parse(data, nameOrPath, "builtin")
	if err != nil {
		return nil, fmt.Errorf("built-in simulation profile %q: %w", nameOrPath, err)
	}
	return p, nil
}

func loadFile(file string) (*Profile, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading simulation profile: %w", err)
	}
	base := filepath.Base(file)
	base = strings.TrimSuffix(strings.TrimSuffix(base, ".yml"), profileExt)
	p, err := parse(data, strings.ToLower(base), file)
	if err != nil {
		return nil, fmt.Errorf("simulation profile %s: %w", file, err)
	}
	return p, nil
}
