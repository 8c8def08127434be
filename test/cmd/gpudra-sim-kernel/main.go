// Command gpudra-sim-kernel is the kernel's side of a simulated node's PCI
// sysfs on the local cluster: it watches one fake driver root
// (test/fakedriver) and performs the effect of each write to a driver's
// bind or unbind or a device's driver_override (fakedriver.KernelWatcher),
// so that the plugin's passthrough (internal/plugin/vfio through
// vfio.HostSysfs) rebinds GPUs there as on a real node. test/localcluster
// starts one per node, with the node. It is test-bed plumbing.
//
//	gpudra-sim-kernel --root=<the node's driver root on the host> [-v=2]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/test/fakedriver"
)

func main() {
	root := flag.String("root", "", "The fake driver root whose sys/bus/pci to act on (the host's path).")
	klog.InitFlags(nil)
	_ = flag.Set("v", "2") // every applied write; -v overrides
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-sim-kernel:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	if root == "" {
		return fmt.Errorf("--root is required: the node's fake driver root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("sim-kernel"))
	w, err := fakedriver.WatchKernel(ctx, &fakedriver.Kernel{Root: root})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop()
}
