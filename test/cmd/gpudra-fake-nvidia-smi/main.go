// Command gpudra-fake-nvidia-smi stands in for nvidia-smi on simulated nodes:
// `compute-policy -i <uuid> --set-timeslice=<n>` records the level under
// $GPUDRA_FAKE_GPU_STATE_DIR or, installed as <R>/usr/bin/nvidia-smi in a fake
// driver root, under <R>/var/lib/gpudra-sim; `-i <idx> -mig 1`, `mig -i <idx>
// -cgi <profiles> -C` and `mig -i <idx> -dci -dgi` change the MIG state of
// that root's simulated node (see test/fakegpu, test/fakedriver).
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
	if err := driverlib.Require("gpudra-fake-nvidia-smi"); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, err)
		os.Exit(9)
	}
	os.Exit(fakegpu.NvidiaSMI(os.Args[1:], os.Stdout, os.Stderr))
}
