// Command gpudra-nvml-idle loads an NVML library as the plugin does
// (go-nvml, dlopen), initialises it, reads its GPUs and idles until it is
// signalled, so that a benchmark can tell what the library adds to a
// process's memory: started once with -library and once without, the
// difference in resident memory is the library's, for the simulated one its
// own Go runtime included (BenchmarkDRASock). See test/nvmlmem.
package main

import (
	"os"

	"github.com/gpudra/gpudra/test/nvmlmem"
)

func main() { os.Exit(nvmlmem.Main(os.Args[1:], os.Stdout, os.Stderr)) }
