package gpuverify

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/gpudra/gpudra/test/fidelity"
)

// fidelityTitle is step 6's section title.
const fidelityTitle = "6. NVML fidelity table (" + fidelity.DocPath + ", as built into the kit): the rows a GPU answers read-only"

// uncataloguedGroups are the model groups of a GPU the simulator's
// catalogue does not have: on an x86 host it is a discrete GPU on x86 (the
// x86 group); elsewhere the kit cannot tell a Grace GPU from a discrete one
// by the host alone, so only the rows about `all` apply.
func uncataloguedGroups(goarch string) []string {
	if goarch == "amd64" {
		return []string{fidelity.GroupX86}
	}
	return nil
}

// fidelity is step 6: each row of the fidelity table whose call only reads
// (test/fidelity's calls: no Set*, Create*, Destroy*, Reset*), made on each
// GPU the row is about, compared with the row's real column. A code the real
// column does not name is a table correction: the table is wrong for this
// GPU. Corrections fail the run only with Config.FailOnTableCorrections.
func (k *kit) fidelity() {
	s := k.r.section(fidelityTitle)
	rows, err := fidelity.Table()
	if err != nil {
		s.fail("read the built-in fidelity table: %v", err)
		return
	}
	res, err := fidelity.Check(k.lib, rows, fidelity.Options{UncataloguedGroups: uncataloguedGroups(runtime.GOARCH)})
	if err != nil {
		s.fail("check the fidelity table: %v", err)
		return
	}
	k.r.Fidelity = res
	for _, g := range res.GPUs {
		if g.Model != "" {
			s.info("GPU %d (%s): the simulator's model %s (%s)", g.Index, g.ProductName, g.Model, strings.Join(g.Groups, ", "))
		} else {
			s.info("GPU %d (%s): not in the simulator's catalogue (test/sim/models); rows about all%s apply", g.Index, g.ProductName,
				strings.Join(append([]string{""}, g.Groups...), " and "))
		}
	}
	s.info("%d row(s) checked; %d about models this machine does not have; %d not checked here (calls that change state, "+
		"or whose arguments the row leaves open: their tests cover them)", res.RowsChecked, res.RowsNotHere, res.RowsNotCallable)
	for _, line := range observedLines(res) {
		s.info("%s", line)
	}
	for _, o := range res.Observations {
		if !o.Correction {
			continue
		}
		text := fmt.Sprintf("TABLE CORRECTION: %s on GPU %d (%s): real NVML answered %s; the real column names %s (simulator: %s)\n"+
			"row: %s\nfix: correct the row's real column (and source: this run), then the simulator if it is kinder",
			o.Row.Call, o.GPU.Index, modelOf(o.GPU), o.Observed, strings.Join(o.Real, ", "), o.Simulator, o.Row.Text())
		if k.cfg.FailOnTableCorrections {
			s.fail("%s", text)
		} else {
			s.info("%s", text)
		}
	}
	switch {
	case res.Corrections == 0:
		s.pass("every checked row's real column names what NVML answered on this machine")
	case !k.cfg.FailOnTableCorrections:
		s.info("%d table correction(s) above: they do not fail the run (-fail-on-table-corrections makes them)", res.Corrections)
	}
}

// observedLines are one line per checked row: where the real answer is
// the simulator's, or differs from it, on which GPUs.
func observedLines(res *fidelity.Result) []string {
	type key struct {
		line     int
		observed string
	}
	var order []key
	gpus := map[key][]string{}
	first := map[key]fidelity.Observation{}
	for _, o := range res.Observations {
		k := key{o.Row.Line, o.Observed}
		if _, seen := gpus[k]; !seen {
			order = append(order, k)
			first[k] = o
		}
		gpus[k] = append(gpus[k], fmt.Sprint(o.GPU.Index))
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		o := first[k]
		how := "as the simulator"
		switch {
		case o.Correction:
			how = "NOT IN THE REAL COLUMN"
		case o.SimulatorDiffers:
			how = "differs from the simulator's " + o.Simulator + " (the real column allows it)"
		}
		out = append(out, fmt.Sprintf("line %d %s [%s]: %s on GPU %s, %s", o.Row.Line, o.Row.Call, o.Row.Models, o.Observed,
			strings.Join(gpus[k], ", "), how))
	}
	return out
}

func modelOf(g fidelity.GPU) string {
	if g.Model != "" {
		return g.Model
	}
	return g.ProductName + ", not in the catalogue"
}
