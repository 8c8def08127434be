package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// CDIHookImagePath is where the gpudra image carries NVIDIA's
// nvidia-cdi-hook (built by hack/build-cdi-hook.sh, copied there by the
// Dockerfile and test/images).
const CDIHookImagePath = "/usr/local/bin/nvidia-cdi-hook"

// CDIHookFile is the name of the hook's copy in the plugin directory.
const CDIHookFile = "nvidia-cdi-hook"

func (o *Options) addCDIHookFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NvidiaCDIHookPath, "nvidia-cdi-hook-path", "",
		"Host path of the nvidia-cdi-hook that the generated CDI specs run as createContainer hooks. Default: the plugin "+
			"installs --nvidia-cdi-hook-source into <plugin dir>/"+CDIHookFile+" at start and names that copy, so nodes "+
			"need no NVIDIA Container Toolkit. Set it to use a toolkit already on the nodes.")
	fs.StringVar(&o.NvidiaCDIHookSource, "nvidia-cdi-hook-source", CDIHookImagePath,
		"The nvidia-cdi-hook that the plugin installs into its plugin directory when --nvidia-cdi-hook-path is empty "+
			"(the gpudra image's own copy).")
}

// cdiHookPath is the host path of nvidia-cdi-hook for the CDI specs:
// --nvidia-cdi-hook-path when set, else the copy installCDIHook makes in
// the plugin directory, which the chart mounts at the host's path.
func (o *Options) cdiHookPath(ctx context.Context) (string, error) {
	if o.NvidiaCDIHookPath != "" {
		return o.NvidiaCDIHookPath, nil
	}
	if err := os.MkdirAll(o.PluginDataDir(), 0o750); err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %w", err)
	}
	return installCDIHook(ctx, o.NvidiaCDIHookSource, filepath.Join(o.PluginDataDir(), CDIHookFile))
}

// installCDIHook copies the hook at src to dst (executable, replaced
// atomically: a container runtime may be running the old copy) unless dst
// already has src's content, and returns dst.
func installCDIHook(ctx context.Context, src, dst string) (string, error) {
	data, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %s is missing (the gpudra image ships it there; "+
			"a plugin run outside the image needs --nvidia-cdi-hook-source, or --nvidia-cdi-hook-path naming a hook on the host): %w", src, err)
	}
	if err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: read %s: %w", src, err)
	}
	if len(data) == 0 {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %s is empty", src)
	}
	logger := klog.FromContext(ctx)
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == 0o755 {
			logger.V(2).Info("nvidia-cdi-hook already installed", "path", dst)
			return dst, nil
		}
	}
	if err := atomicfile.WriteFile(dst, data, 0o755); err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %w", err)
	}
	logger.Info("Installed nvidia-cdi-hook for the CDI specs", "source", src, "path", dst, "bytes", len(data))
	return dst, nil
}
