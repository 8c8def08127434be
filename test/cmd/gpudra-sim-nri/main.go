// Command gpudra-sim-nri is the local cluster's NRI plugin (Node Resource
// Interface, github.com/containerd/nri): each node's containerd starts it
// from its NRI plugin directory, and it adds the fake driver root's
// process-recording hook (test/fakedriver, RecordHook) to every container as
// a createContainer hook. The hook makes a container that got simulated GPUs
// a compute process of those GPUs for the simulated NVML, for as long as the
// container lives, so that telemetry shows load. It is test-bed plumbing:
// the CDI specs the plugin writes name only NVIDIA's real nvidia-cdi-hook.
//
//	gpudra-sim-nri --record-hook=/var/lib/gpudra-sim/driver-root/usr/libexec/gpudra-sim/record-process
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// plugin adds one createContainer hook to every container.
type plugin struct {
	hook string
}

// CreateContainer implements stub.CreateContainerInterface.
func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddHooks(&api.Hooks{CreateContainer: []*api.Hook{{Path: p.hook, Args: []string{filepath.Base(p.hook)}}}})
	return adjust, nil, nil
}

func main() {
	hook := flag.String("record-hook", "", "Absolute path (as the node's runtime sees it) of the hook to add to every container.")
	flag.Parse()
	if err := run(*hook); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-sim-nri:", err)
		os.Exit(1)
	}
}

func run(hook string) error {
	if !filepath.IsAbs(hook) {
		return fmt.Errorf("--record-hook=%q: want the hook's absolute path", hook)
	}
	// Started by containerd from its plugin directory, the stub takes its
	// name, index and pre-connected socket from the environment.
	s, err := stub.New(&plugin{hook: hook}, stub.WithOnClose(func() { os.Exit(0) }))
	if err != nil {
		return fmt.Errorf("create the NRI plugin: %w", err)
	}
	if err := s.Run(context.Background()); err != nil {
		return fmt.Errorf("run the NRI plugin: %w", err)
	}
	return nil
}
