package fidelity

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is a GPU of the checked library and the catalogue model it is.
type GPU struct {
	Index       int    `json:"index"`
	ProductName string `json:"productName"`
	// Model is the catalogue model of that product name; empty when the
	// catalogue has none.
	Model  string   `json:"model,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

// Observation is one row checked on one GPU.
type Observation struct {
	Row Row `json:"row"`
	GPU GPU `json:"gpu"`
	// Observed is the code the library answered; Real the codes of the
	// row's real column, Simulator the simulator column's code.
	Observed  string   `json:"observed"`
	Real      []string `json:"real"`
	Simulator string   `json:"simulator"`
	// Correction: Observed is none of Real, so the table's real column is
	// wrong for this GPU (a table correction).
	Correction bool `json:"correction"`
	// SimulatorDiffers: Observed is among Real but is not the simulator's
	// code (the real answer varies and this GPU gave another one).
	SimulatorDiffers bool `json:"simulatorDiffers"`
}

// Result of a check of the table against one library.
type Result struct {
	GPUs         []GPU         `json:"gpus"`
	Observations []Observation `json:"observations"`
	// Corrections counts the observations with Correction set.
	Corrections int `json:"corrections"`
	// RowsChecked: rows checked on at least one GPU. RowsNotHere: rows
	// with a call Check makes but about models none of the GPUs is.
	// RowsNotCallable: rows whose call changes state or whose arguments the
	// row leaves open (their tests cover them).
	RowsChecked     int `json:"rowsChecked"`
	RowsNotHere     int `json:"rowsNotHere"`
	RowsNotCallable int `json:"rowsNotCallable"`
}

// Options of Check.
type Options struct {
	// UncataloguedGroups are the groups of a GPU whose product name the
	// catalogue does not have (the kit: x86 on an amd64 host, else none).
	// Rows about `all` apply to every GPU.
	UncataloguedGroups []string
}

// Check makes each row's call on each GPU of lib that the row is about,
// and compares NVML's code with the row's real column. lib is initialized.
// The error is for a library that does not list its GPUs or a table that
// does not parse; what the GPUs answer is in the Result.
func Check(lib nvml.Interface, rows []Row, opts Options) (*Result, error) {
	catalogue, err := Catalogue()
	if err != nil {
		return nil, err
	}
	res := &Result{}
	devices, err := gpus(lib, catalogue, opts, res)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		call, ok := CallFor(row.Call)
		if !ok {
			res.RowsNotCallable++
			continue
		}
		sel, err := ParseModels(row.Models, catalogue)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", DocPath, row.Line, err)
		}
		real, sim := ReturnCodes(row.Real), ReturnCodes(row.Simulator)
		if len(real) == 0 || len(sim) == 0 {
			return nil, fmt.Errorf("%s:%d: the real and simulator columns start with a return code (SUCCESS, NOT_SUPPORTED, ...)",
				DocPath, row.Line)
		}
		checked := false
		for i, g := range res.GPUs {
			if !sel.Applies(g.Model, g.Groups) {
				continue
			}
			checked = true
			got := call(lib, devices[i], g.Index)
			o := Observation{Row: row, GPU: g, Observed: CodeName(got), Real: CodeNames(real), Simulator: CodeName(sim[0]),
				Correction: !slices.Contains(real, got)}
			o.SimulatorDiffers = !o.Correction && got != sim[0]
			if o.Correction {
				res.Corrections++
			}
			res.Observations = append(res.Observations, o)
		}
		if checked {
			res.RowsChecked++
		} else {
			res.RowsNotHere++
		}
	}
	return res, nil
}

// gpus lists lib's GPUs into res.GPUs and returns their handles.
func gpus(lib nvml.Interface, catalogue []Model, opts Options, res *Result) ([]nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count the GPUs (nvmlDeviceGetCount): %s", CodeName(ret))
	}
	var devices []nvml.Device
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetHandleByIndex: %s (a GPU that does not answer: see the health section)", i, CodeName(ret))
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetName: %s", i, CodeName(ret))
		}
		g := GPU{Index: i, ProductName: name, Groups: opts.UncataloguedGroups}
		if m, ok := MatchProduct(catalogue, name); ok {
			g.Model, g.Groups = m.Name, m.Groups
		}
		res.GPUs = append(res.GPUs, g)
		devices = append(devices, d)
	}
	return devices, nil
}
