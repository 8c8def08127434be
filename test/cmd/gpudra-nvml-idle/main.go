// Command gpudra-nvml-idle loads an NVML library as the plugin does
// (go-nvml, dlopen), initialises it and idles until it is signalled, so that
// a benchmark can tell what the library adds to a process's memory: started
// once with --library and once without, the difference in resident memory is
// the library's, for the simulated one its own Go runtime included
// (BenchmarkDRASock). It prints "ready" once initialised.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	path := flag.String("library", "", "libnvidia-ml to load and initialise; empty: idle without NVML")
	flag.Parse()
	if *path != "" {
		lib := nvml.New(nvml.WithLibraryPath(*path))
		if ret := lib.Init(); ret != nvml.SUCCESS {
			_, _ = fmt.Fprintf(os.Stderr, "nvmlInit of %s: %v\n", *path, ret)
			os.Exit(1)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready")
	<-stop
}
