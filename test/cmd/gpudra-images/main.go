// Command gpudra-images writes the local cluster's container images as OCI
// image layout tarballs for `ctr -n k8s.io images import` (see test/images):
//
//	gpudra-images build --out DIR [--bin-dir DIR] [--busybox-root DIR] [--debian-root DIR] [--chart DIR] [--host-root DIR]
//	gpudra-images build-failpoints --out DIR --bin-dir DIR [--chart DIR] [--host-root DIR]
//	gpudra-images names [--chart DIR]
//	gpudra-images verify FILE...
//
// build writes pause.tar, workload.tar and gpudra.tar and prints "NAME FILE"
// per image; build-failpoints writes gpudra-failpoints.tar, the gpudra image
// with a plugin built with -tags failpoints (make images-failpoints); names prints the three image names; verify reads tarballs back
// and checks their digests. Paths default to the repository's layout (run
// it from the repository root); `make images` builds the binaries and runs
// build.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/test/images"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = "usage: gpudra-images build --out DIR [flags] | build-failpoints --out DIR --bin-dir DIR [flags] | names [--chart DIR] | verify FILE..."

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = fmt.Fprintln(stderr, usage)
		return 2
	}
	src := images.Sources{
		BinDir:      filepath.Join("_output", "images", "bin"),
		BusyboxRoot: filepath.Join("_output", "busybox-static"),
		DebianRoot:  filepath.Join("_output", "workload-root"),
		HostRoot:    "/",
		ChartDir:    images.DefaultChartDir,
	}
	var out string
	fs := pflag.NewFlagSet("gpudra-images "+args[0], pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&src.ChartDir, "chart", src.ChartDir, "The Helm chart, whose values.yaml and values-simulated.yaml name the gpudra image.")
	switch args[0] {
	case "build":
		fs.StringVar(&out, "out", "", "Directory for pause.tar, workload.tar and gpudra.tar (required).")
		fs.StringVar(&src.BinDir, "bin-dir", src.BinDir, "Directory with gpudra-pause and gpudra-gpus (static) and gpu-kubelet-plugin and gpu-controller (built like the Dockerfile builds them).")
		fs.StringVar(&src.BusyboxRoot, "busybox-root", src.BusyboxRoot, "Debian's busybox-static package unpacked with dpkg-deb -x (make busybox-static).")
		fs.StringVar(&src.DebianRoot, "debian-root", src.DebianRoot, "The workload image's Debian C library, ldconfig and bash, unpacked into one root (make workload-root).")
		fs.StringVar(&src.HostRoot, "host-root", src.HostRoot, "Root file system the C library and CA certificates are taken from.")
	case "build-failpoints":
		fs.StringVar(&out, "out", "", "Directory for gpudra-failpoints.tar (required).")
		fs.StringVar(&src.BinDir, "bin-dir", "", "Directory with gpu-kubelet-plugin built with -tags failpoints and gpu-controller, both built like the Dockerfile builds them (required).")
		fs.StringVar(&src.HostRoot, "host-root", src.HostRoot, "Root file system the C library and CA certificates are taken from.")
	case "names", "verify":
	default:
		_, _ = fmt.Fprintln(stderr, usage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		_, _ = fmt.Fprintln(stderr, "gpudra-images:", err)
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = build(out, src, fs.Args(), stdout)
	case "build-failpoints":
		err = buildFailpoints(out, src, fs.Args(), stdout)
	case "names":
		err = names(src.ChartDir, fs.Args(), stdout)
	case "verify":
		err = verify(fs.Args(), stdout)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-images:", err)
		var usageErr usageError
		if errors.As(err, &usageErr) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError string

func (e usageError) Error() string { return string(e) }

func build(out string, src images.Sources, extra []string, stdout io.Writer) error {
	if out == "" || len(extra) > 0 {
		return usageError("build needs --out DIR and no arguments")
	}
	written, err := images.BuildAll(out, src)
	if err != nil {
		return err
	}
	for _, w := range written {
		_, _ = fmt.Fprintln(stdout, w.Name, w.Path)
	}
	return nil
}

func buildFailpoints(out string, src images.Sources, extra []string, stdout io.Writer) error {
	if out == "" || src.BinDir == "" || len(extra) > 0 {
		return usageError("build-failpoints needs --out DIR, --bin-dir DIR and no arguments")
	}
	w, err := images.BuildFailpoints(out, src)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintln(stdout, w.Name, w.Path)
	return nil
}

func names(chart string, extra []string, stdout io.Writer) error {
	if len(extra) > 0 {
		return usageError("names takes no arguments")
	}
	gpudra, err := images.GpudraImageName(chart)
	if err != nil {
		return err
	}
	for _, n := range []string{images.PauseImage, images.WorkloadImage, gpudra} {
		_, _ = fmt.Fprintln(stdout, n)
	}
	return nil
}

func verify(files []string, stdout io.Writer) error {
	if len(files) == 0 {
		return usageError("verify needs image tarballs")
	}
	for _, f := range files {
		c, err := images.Read(f)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stdout, "%s: %s, manifest %s, %d files, layer %d bytes\n", f, c.Name, c.Manifest.Digest, len(c.Files), c.Layer.Size)
	}
	return nil
}
