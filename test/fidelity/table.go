// Package fidelity reads the NVML fidelity table (docs/nvml-fidelity.md)
// and knows how to make the table's read-only NVML calls through go-nvml's
// nvml.Interface, so that the same rows are checked against the simulated
// library (test/sim's TestFidelityDoc: the simulator column) and against a
// real GPU (test/gpuverify: the real column). It does not link the
// simulator: the model catalogue is read from test/sim/models.
package fidelity

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/docs"
)

// DocPath is the table's document, relative to the repository root.
const DocPath = "docs/nvml-fidelity.md"

// Row is one row of a table of the document.
type Row struct {
	// Section is the heading (## ...) the row's table is under.
	Section string `json:"section"`
	// Call is the call column without backquotes.
	Call      string `json:"call"`
	Models    string `json:"models"`
	Real      string `json:"real"`
	Source    string `json:"source"`
	Simulator string `json:"simulator"`
	Test      string `json:"test"`
	// Line is the row's line number in the document.
	Line int `json:"line"`
}

// Text is the row as a reader finds it: document, line, call, models.
func (r Row) Text() string {
	return fmt.Sprintf("%s:%d: %s | %s | real: %s | simulator: %s", DocPath, r.Line, r.Call, r.Models, r.Real, r.Simulator)
}

// Table parses the table embedded at build time.
func Table() ([]Row, error) { return Parse(docs.NVMLFidelity) }

// Parse reads every row of every table of doc (a table row is a line that
// starts with "|", other than the header and the separator line).
func Parse(doc []byte) ([]Row, error) {
	var rows []Row
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if s, ok := strings.CutPrefix(line, "## "); ok {
			section = s
			continue
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| call ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 6 {
			return nil, fmt.Errorf("%s:%d: a row has six columns (call | models | real | source | simulator | test), this one %d: %s",
				DocPath, n, len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, Row{Section: section, Call: strings.Trim(cells[0], "`"), Models: cells[1],
			Real: cells[2], Source: cells[3], Simulator: cells[4], Test: cells[5], Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", DocPath, err)
	}
	return rows, nil
}

var codeRE = regexp.MustCompile(`\b[A-Z][A-Z_]{3,}[A-Z]\b`)

// ReturnCodes are the NVML return codes a column names, in order; nil
// unless the column starts with one.
func ReturnCodes(col string) []nvml.Return {
	var out []nvml.Return
	for i, w := range codeRE.FindAllStringIndex(col, -1) {
		word := col[w[0]:w[1]]
		ret, ok := ReturnByName(word)
		if i == 0 && (w[0] != 0 || !ok) {
			return nil
		}
		if ok {
			out = append(out, ret)
		}
	}
	return out
}

// returnNames are NVML's return codes as the table writes them (nvml.h's
// NVML_ERROR_ names without the prefix). Return.String cannot name them: once
// a real libnvidia-ml is loaded it answers the library's prose ("Not
// Supported").
var returnNames = map[nvml.Return]string{
	nvml.SUCCESS: "SUCCESS", nvml.ERROR_UNINITIALIZED: "UNINITIALIZED", nvml.ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED: "NOT_SUPPORTED", nvml.ERROR_NO_PERMISSION: "NO_PERMISSION",
	nvml.ERROR_ALREADY_INITIALIZED: "ALREADY_INITIALIZED", nvml.ERROR_NOT_FOUND: "NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_SIZE: "INSUFFICIENT_SIZE", nvml.ERROR_INSUFFICIENT_POWER: "INSUFFICIENT_POWER",
	nvml.ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED", nvml.ERROR_TIMEOUT: "TIMEOUT", nvml.ERROR_IRQ_ISSUE: "IRQ_ISSUE",
	nvml.ERROR_LIBRARY_NOT_FOUND: "LIBRARY_NOT_FOUND", nvml.ERROR_FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
	nvml.ERROR_CORRUPTED_INFOROM: "CORRUPTED_INFOROM", nvml.ERROR_GPU_IS_LOST: "GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED: "RESET_REQUIRED", nvml.ERROR_OPERATING_SYSTEM: "OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "LIB_RM_VERSION_MISMATCH", nvml.ERROR_IN_USE: "IN_USE", nvml.ERROR_MEMORY: "MEMORY",
	nvml.ERROR_NO_DATA: "NO_DATA", nvml.ERROR_VGPU_ECC_NOT_SUPPORTED: "VGPU_ECC_NOT_SUPPORTED",
	nvml.ERROR_INSUFFICIENT_RESOURCES: "INSUFFICIENT_RESOURCES", nvml.ERROR_FREQ_NOT_SUPPORTED: "FREQ_NOT_SUPPORTED",
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "ARGUMENT_VERSION_MISMATCH", nvml.ERROR_DEPRECATED: "DEPRECATED",
	nvml.ERROR_UNKNOWN: "UNKNOWN",
}

// ReturnByName is the code the table writes as name: SUCCESS,
// NOT_SUPPORTED (nvml.ERROR_NOT_SUPPORTED), ...
func ReturnByName(name string) (nvml.Return, bool) {
	for r, n := range returnNames {
		if n == name || "ERROR_"+n == name {
			return r, true
		}
	}
	return 0, false
}

// CodeName is how the table writes ret: SUCCESS, NOT_SUPPORTED, ...
func CodeName(ret nvml.Return) string {
	if n, ok := returnNames[ret]; ok {
		return n
	}
	return fmt.Sprintf("return code %d", int32(ret))
}

// CodeNames are CodeName of each of rets.
func CodeNames(rets []nvml.Return) []string {
	out := make([]string, len(rets))
	for i, r := range rets {
		out[i] = CodeName(r)
	}
	return out
}
