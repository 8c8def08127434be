// Command gpudra-fake-imex-ctl stands in for nvidia-imex-ctl on simulated
// nodes: `[-c <config>] -q` prints the local IMEX daemon's state, `-N` its
// nodes (see test/fakegpu/README.md).
package main

import (
	"os"

	"github.com/gpudra/gpudra/test/fakegpu"
)

func main() { os.Exit(fakegpu.IMEXCtl(os.Args[1:], os.Stdout, os.Stderr)) }
