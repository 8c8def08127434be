// Command gpudra-fake-imex stands in for nvidia-imex on simulated nodes:
// `-c <config>` runs the IMEX daemon in the foreground (see
// test/fakegpu/README.md for what it models).
package main

import (
	"os"

	"github.com/gpudra/gpudra/test/fakegpu"
)

func main() { os.Exit(fakegpu.IMEX(os.Args[1:], os.Stderr)) }
