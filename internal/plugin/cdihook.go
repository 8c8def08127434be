package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
// already has src's content, and returns dst. Both files are streamed, never
// read whole: the hook is several MiB, and a heap that held it twice at start
// stayed in the idle plugin's RSS (the Go runtime returns freed pages slowly).
func installCDIHook(ctx context.Context, src, dst string) (string, error) {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %s is missing (the gpudra image ships it there; "+
			"a plugin run outside the image needs --nvidia-cdi-hook-source, or --nvidia-cdi-hook-path naming a hook on the host): %w", src, err)
	}
	if err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: read %s: %w", src, err)
	}
	defer func() { _ = in.Close() }()
	fi, err := in.Stat()
	if err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: read %s: %w", src, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %s is empty or not a regular file", src)
	}
	logger := klog.FromContext(ctx)
	if same, err := installed(in, dst); err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: compare %s with %s: %w", src, dst, err)
	} else if same {
		logger.V(2).Info("nvidia-cdi-hook already installed", "path", dst)
		return dst, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: read %s: %w", src, err)
	}
	// The writer is the temp file itself, so io.Copy copies in the kernel.
	if err := atomicfile.Write(dst, 0o755, atomicfile.SyncAll, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}); err != nil {
		return "", fmt.Errorf("install nvidia-cdi-hook for the CDI specs: %w", err)
	}
	logger.Info("Installed nvidia-cdi-hook for the CDI specs", "source", src, "path", dst, "bytes", fi.Size())
	return dst, nil
}

// installed tells whether dst is an executable (0755) copy of src: same
// size, same bytes, compared a block at a time. A missing dst is not one.
func installed(src *os.File, dst string) (bool, error) {
	out, err := os.Open(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = out.Close() }()
	sfi, err := src.Stat()
	if err != nil {
		return false, err
	}
	dfi, err := out.Stat()
	if err != nil {
		return false, err
	}
	if dfi.Mode().Perm() != 0o755 || sfi.Size() != dfi.Size() {
		return false, nil
	}
	const block = 64 << 10
	a, b := make([]byte, block), make([]byte, block)
	for {
		n, errA := io.ReadFull(src, a)
		m, errB := io.ReadFull(out, b)
		if !bytes.Equal(a[:n], b[:m]) {
			return false, nil
		}
		doneA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		doneB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		if doneA || doneB {
			return doneA && doneB, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}
