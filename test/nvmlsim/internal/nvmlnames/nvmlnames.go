// Package nvmlnames lists the NVML C functions go-nvml calls.
package nvmlnames

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ErrorString is the one NVML function that does not return nvmlReturn_t.
const ErrorString = "nvmlErrorString"

var callRE = regexp.MustCompile(`C\.(nvml[A-Za-z0-9_]+)\(`)

// Parse returns the sorted, distinct NVML functions called as C.nvmlXxx(
// in Go source.
func Parse(src []byte) []string {
	var names []string
	for _, m := range callRE.FindAllSubmatchIndex(src, -1) {
		if m[0] > 0 && (src[m[0]-1] == '.' || src[m[0]-1] == '_' || isAlnum(src[m[0]-1])) {
			continue // x.C.nvml..., or a longer identifier ending in C
		}
		if name := string(src[m[2]:m[3]]); !strings.HasSuffix(name, "_t") { // not a conversion, C.nvmlReturn_t(x)
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// FromFile parses go-nvml's bindings (pkg/nvml/nvml.go of the module).
func FromFile(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read go-nvml bindings: %w", err)
	}
	names := Parse(src)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s calls no C.nvml* function: not go-nvml's bindings?", path)
	}
	return names, nil
}
