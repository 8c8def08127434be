// Command gpudra-fake-mps-control stands in for nvidia-cuda-mps-control on
// simulated nodes: `-f` runs the control daemon in the foreground, without
// arguments it sends the commands on stdin to the daemon (see test/fakegpu).
package main

import (
	"fmt"
	"os"

	"github.com/gpudra/gpudra/test/fakegpu"
	"github.com/gpudra/gpudra/test/fakegpu/driverlib"
)

func main() {
	// As demanding as the real tool: dynamically linked, and it needs the
	// driver's NVML library (test/fakegpu/driverlib).
	if err := driverlib.Require("gpudra-fake-mps-control"); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, err)
		os.Exit(9)
	}
	os.Exit(fakegpu.MPSControl(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
