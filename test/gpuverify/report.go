package gpuverify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/test/fidelity"
	"github.com/gpudra/gpudra/test/nvmlmem"
)

// Status of a report entry.
type Status string

const (
	// Info entries describe what was found; they never fail the run.
	Info Status = "info"
	// Pass and Fail entries are checks.
	Pass Status = "pass"
	Fail Status = "fail"
)

// Entry is one line of a report section.
type Entry struct {
	Status Status `json:"status"`
	Text   string `json:"text"`
}

// Section is one step of the verification.
type Section struct {
	Title   string  `json:"title"`
	Entries []Entry `json:"entries"`
}

func (s *Section) add(st Status, format string, args ...any) {
	s.Entries = append(s.Entries, Entry{Status: st, Text: fmt.Sprintf(format, args...)})
}

func (s *Section) info(format string, args ...any) { s.add(Info, format, args...) }
func (s *Section) pass(format string, args ...any) { s.add(Pass, format, args...) }
func (s *Section) fail(format string, args ...any) { s.add(Fail, format, args...) }

// check records a pass when err is nil, else a failure that names err.
// It returns whether the check passed.
func (s *Section) check(err error, what string) bool {
	if err != nil {
		s.fail("%s: %v", what, err)
		return false
	}
	s.pass("%s", what)
	return true
}

// ClaimResult is what happened to one claim the kit prepared.
type ClaimResult struct {
	Name    string   `json:"name"`
	UID     string   `json:"uid"`
	Devices []string `json:"devices"`
	// CDIDeviceIDs are what the prepare returned for the kubelet.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// Spec is the CDI spec the prepare wrote.
	Spec *cdispec.Spec `json:"spec,omitempty"`
	// HostPaths are the host paths the spec names, each checked to exist.
	HostPaths []string `json:"hostPaths,omitempty"`
	Prepared  bool     `json:"prepared"`
	// Unprepared: unprepare succeeded and left neither spec nor record.
	Unprepared bool `json:"unprepared"`
}

// Report is the kit's result. Passed and Failed count the checks of all
// sections; the run failed when Failed > 0.
type Report struct {
	ReadOnly   string     `json:"readOnly"`
	NodeName   string     `json:"nodeName"`
	DriverRoot string     `json:"driverRoot,omitempty"`
	Library    string     `json:"library,omitempty"`
	Sections   []*Section `json:"sections"`
	// Inspection has the same shape as `gpu-kubelet-plugin inspect -o json`.
	Inspection *Inspection      `json:"inspection,omitempty"`
	Claims     []*ClaimResult   `json:"claims,omitempty"`
	Health     *HealthResult    `json:"health,omitempty"`
	Telemetry  *TelemetryResult `json:"telemetry,omitempty"`
	// Fidelity is step 6: every row checked, on which GPU, and the table
	// corrections (Observations with correction set).
	Fidelity *fidelity.Result `json:"fidelity,omitempty"`
	// Memory is step 9: what the library adds to an idle process.
	Memory *nvmlmem.Footprint `json:"memory,omitempty"`
	Passed int                `json:"passed"`
	Failed int                `json:"failed"`
}

func (r *Report) section(title string) *Section {
	s := &Section{Title: title}
	r.Sections = append(r.Sections, s)
	return s
}

// count sets Passed and Failed from the sections' checks.
func (r *Report) count() {
	r.Passed, r.Failed = 0, 0
	for _, s := range r.Sections {
		for _, e := range s.Entries {
			switch e.Status {
			case Pass:
				r.Passed++
			case Fail:
				r.Failed++
			}
		}
	}
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return r.Failed == 0 }

// Summary is the report's last line: "N passed, N failed".
func (r *Report) Summary() string { return fmt.Sprintf("%d passed, %d failed", r.Passed, r.Failed) }

// WriteText writes the human-readable report. Its last line is Summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("gpudra GPU verification kit\n")
	b.WriteString(r.ReadOnly + "\n")
	fmt.Fprintf(&b, "Node: %s   Driver root: %s\n", r.NodeName, orNone(r.DriverRoot))
	if r.Library != "" {
		fmt.Fprintf(&b, "NVML: %s\n", r.Library)
	}
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n== %s ==\n", s.Title)
		for _, e := range s.Entries {
			prefix := "        "
			switch e.Status {
			case Pass:
				prefix = "  PASS  "
			case Fail:
				prefix = "  FAIL  "
			}
			// Continuation lines of a multi-line entry line up under its text.
			b.WriteString(prefix + strings.ReplaceAll(e.Text, "\n", "\n        ") + "\n")
		}
	}
	b.WriteString("\n" + r.Summary() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
