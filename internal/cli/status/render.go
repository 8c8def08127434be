package status

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Print writes the devices as "table" (default) or "json".
func Print(w io.Writer, devices []Device, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if devices == nil {
			devices = []Device{}
		}
		return enc.Encode(devices)
	case "", "table":
		// Writes into the tabwriter only buffer; Flush reports a write error.
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "NODE\tDEVICE\tTYPE\tMODEL\tMEMORY\tUSED\tUTIL\tHEALTH\tTAINTS\tNAMESPACE/POD\tCLAIM")
		for _, d := range devices {
			pods, claims := "-", "-"
			if len(d.Holders) > 0 {
				var ps, cs []string
				for _, h := range d.Holders {
					cs = append(cs, h.Namespace+"/"+h.Claim)
					for _, p := range h.Pods {
						ps = append(ps, h.Namespace+"/"+p)
					}
				}
				claims = strings.Join(cs, ",")
				if len(ps) > 0 {
					pods = strings.Join(ps, ",")
				}
			}
			taints := "-"
			if len(d.Taints) > 0 {
				taints = strings.Join(d.Taints, ",")
			}
			used, util := "-", "-"
			if u := d.Usage; u != nil {
				if u.MemoryUsed != nil {
					used = bytesString(*u.MemoryUsed)
				}
				if u.Utilization != nil {
					util = strconv.Itoa(int(math.Round(*u.Utilization*100))) + "%"
				}
			}
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				d.Node, d.Name, d.Type, d.Model, orDash(d.Memory), used, util, d.Health, taints, pods, claims)
		}
		return tw.Flush()
	default:
		return fmt.Errorf("unknown output format %q: use table or json", format)
	}
}

// bytesString writes a memory size the way the MEMORY column does: Gi
// with one decimal from 1 Gi on, else Mi.
func bytesString(b float64) string {
	const mi, gi = 1 << 20, 1 << 30
	if b >= gi {
		return strconv.FormatFloat(b/gi, 'f', 1, 64) + "Gi"
	}
	return strconv.Itoa(int(b/mi)) + "Mi"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
