package gpuverify

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// toolsTitle is step 7's section title.
const toolsTitle = "7. The driver's tools, started as the plugin starts them"

// toolTimeout bounds the start of a tool.
const toolTimeout = 30 * time.Second

// tools is step 7: nvidia-smi, found where the plugin looks for it
// (nvmllib.FindTool under the driver root), lists every GPU discovery found
// when started with the environment the plugin gives it from a driver root
// mounted into its container (nvmllib.ToolEnv: only the root's
// libnvidia-ml.so.1 preloaded). `nvidia-smi -L` only reads.
// nvidia-cuda-mps-control is only looked up: starting it would start an
// MPS control daemon on the GPUs.
func (k *kit) tools(ctx context.Context, node *model.Node) {
	s := k.r.section(toolsTitle)
	root := k.cfg.DriverRoot
	if root == "" {
		root = "/"
	}
	// The tools load the driver's libnvidia-ml: only a run on the root's
	// own library (ForDriverRoot) starts them.
	lib, err := nvmllib.FindLibrary(root)
	if err != nil || lib != k.cfg.Library {
		s.info("Skipped: the kit's NVML (%s) is not the driver root's libnvidia-ml (%s, %v); the tools would load that one", k.cfg.Library, lib, err)
		return
	}
	if p := nvmllib.FindTool(root, "nvidia-cuda-mps-control"); p != "" {
		s.info("nvidia-cuda-mps-control: %s (not started: it would start an MPS daemon)", p)
	} else {
		s.info("nvidia-cuda-mps-control: not found under %s or on $PATH (MPS claims would fail on this node)", root)
	}
	smi := nvmllib.FindTool(root, "nvidia-smi")
	if smi == "" {
		s.fail("nvidia-smi: not found under %s (%s) or on $PATH: time slicing would fail on this node", root, strings.Join(nvmllib.ToolDirs, ", "))
		return
	}
	// A root of / gets no preload from ToolEnv (the host's loader finds the
	// library); the plugin in its container always sees the root mounted
	// elsewhere, so the kit preloads as it would.
	env := nvmllib.ToolEnv(root)
	if env == nil {
		env = []string{"LD_PRELOAD=" + lib}
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "-L")
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		s.fail("%s -L with %v: %v: %s", smi, env, err, strings.TrimSpace(stderr.String()+out.String()))
		return
	}
	var missing []string
	for _, g := range node.GPUs {
		if !strings.Contains(out.String(), g.UUID) {
			missing = append(missing, g.UUID)
		}
	}
	if len(missing) > 0 {
		s.fail("%s -L does not list GPU(s) %s that NVML reports:\n%s", smi, strings.Join(missing, ", "), strings.TrimSpace(out.String()))
		return
	}
	s.pass("%s -L with %v lists all %d GPU(s)", smi, env, len(node.GPUs))
}
