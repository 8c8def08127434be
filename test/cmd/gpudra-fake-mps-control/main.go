// Command gpudra-fake-mps-control stands in for nvidia-cuda-mps-control on
// simulated nodes: `-f` runs the control daemon in the foreground, without
// arguments it sends the commands on stdin to the daemon (see test/fakegpu).
package main

import (
	"os"

	"github.com/gpudra/gpudra/test/fakegpu"
)

func main() { os.Exit(fakegpu.MPSControl(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
