// Package nvmlnames lists the NVML C functions go-nvml calls.
package nvmlnames

import (
	"fmt"
	"os"
	"regexp"
	"slices"
)

// ErrorString is the one NVML function that does not return nvmlReturn_t.
const ErrorString = "nvmlErrorString"

var callRE = regexp.MustCompile(`\bC\.(nvml[A-Za-z0-9_]+)\(`)

// Parse returns the sorted, distinct NVML functions called as C.nvmlXxx(
// in Go source.
func Parse(src []byte) []string {
	var names []string
	for _, m := range callRE.FindAllSubmatch(src, -1) {
		names = append(names, string(m[1]))
	}
	slices.Sort(names)
	return slices.Compact(names)
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
