// Command gpudra-sim-nri is the local cluster's NRI plugin (Node Resource
// Interface, github.com/containerd/nri): each node's containerd starts it
// from its NRI plugin directory, and it adds the fake driver root's
// process-recording hook (test/fakedriver, RecordHook) to every container as
// a createContainer hook. The hook makes a container that got simulated GPUs
// a compute process of those GPUs for the simulated NVML, for as long as the
// container lives, so that telemetry shows load. It is test-bed plumbing:
// the CDI specs the plugin writes name only NVIDIA's real nvidia-cdi-hook.
//
// With --restrict-oom-score-adj it also raises a container's oom_score_adj
// that is below its own to its own, as containerd's restrict_oom_score_adj
// does: the test machines lack CAP_SYS_RESOURCE, so crun fails to start a
// container with a lower score (the kubelet gives critical and Guaranteed
// pods -997), and CRI-O has no such setting.
//
//	gpudra-sim-nri --record-hook=/var/lib/gpudra-sim/driver-root/usr/libexec/gpudra-sim/record-process [--restrict-oom-score-adj]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// plugin adds one createContainer hook to every container and, when
// minOOMScoreAdj is set, raises lower oom_score_adj values to it.
type plugin struct {
	hook           string
	minOOMScoreAdj *int
}

// CreateContainer implements stub.CreateContainerInterface.
func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.AddHooks(&api.Hooks{CreateContainer: []*api.Hook{{Path: p.hook, Args: []string{filepath.Base(p.hook)}}}})
	if score := restrictedOOMScoreAdj(ctr.GetLinux().GetOomScoreAdj(), p.minOOMScoreAdj); score != nil {
		adjust.SetLinuxOomScoreAdj(score)
	}
	return adjust, nil, nil
}

// restrictedOOMScoreAdj is the score to set instead of the container's, or
// nil to keep it.
func restrictedOOMScoreAdj(score *api.OptionalInt, minimum *int) *int {
	if minimum == nil || score == nil || int(score.GetValue()) >= *minimum {
		return nil
	}
	return minimum
}

// ownOOMScoreAdj is this process's oom_score_adj (the runtime's: it starts
// the plugin).
func ownOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("/proc/self/oom_score_adj: %w", err)
	}
	return v, nil
}

func main() {
	hook := flag.String("record-hook", "", "Absolute path (as the node's runtime sees it) of the hook to add to every container.")
	restrict := flag.Bool("restrict-oom-score-adj", false, "Raise a container's oom_score_adj below this process's own to its own (containerd's restrict_oom_score_adj, for CRI-O).")
	flag.Parse()
	if err := run(*hook, *restrict); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-sim-nri:", err)
		os.Exit(1)
	}
}

func run(hook string, restrict bool) error {
	if !filepath.IsAbs(hook) {
		return fmt.Errorf("--record-hook=%q: want the hook's absolute path", hook)
	}
	p := &plugin{hook: hook}
	if restrict {
		own, err := ownOOMScoreAdj()
		if err != nil {
			return fmt.Errorf("--restrict-oom-score-adj: read this process's score: %w", err)
		}
		p.minOOMScoreAdj = &own
	}
	// Started by containerd from its plugin directory, the stub takes its
	// name, index and pre-connected socket from the environment.
	s, err := stub.New(p, stub.WithOnClose(func() { os.Exit(0) }))
	if err != nil {
		return fmt.Errorf("create the NRI plugin: %w", err)
	}
	if err := s.Run(context.Background()); err != nil {
		return fmt.Errorf("run the NRI plugin: %w", err)
	}
	return nil
}
