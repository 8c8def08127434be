package images

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The fault suite's image (make images-failpoints, make test-faults): the
// gpudra image with a gpu-kubelet-plugin built with the failpoints tag
// (internal/plugin/failpoint), everything else as GpudraSpec makes it, so the check of
// GpudraSpec against the Dockerfile covers it too.
const (
	// FailpointsBuildTag is the Go build tag that compiles the failpoints in.
	FailpointsBuildTag = "failpoints"
	// FailpointsImageTag replaces the chart's tag in the image's name.
	FailpointsImageTag = "failpoints"
	// FailpointsTar is its tarball's file name.
	FailpointsTar = "gpudra-failpoints.tar"
)

// FailpointsImageName is the chart's gpudra image name with the tag
// FailpointsImageTag, e.g. ghcr.io/gpudra/gpudra:failpoints: installing the
// chart with --set image.tag=failpoints runs it.
func FailpointsImageName(chartDir string) (string, error) {
	name, err := GpudraImageName(chartDir)
	if err != nil {
		return "", err
	}
	repo, _, _ := strings.Cut(name, ":")
	return repo + ":" + FailpointsImageTag, nil
}

// FailpointsSpec is GpudraSpec with s.BinDir's gpu-kubelet-plugin built
// with the failpoints tag (refused otherwise) and the failpoints name.
func FailpointsSpec(s Sources) (Image, error) {
	plugin := filepath.Join(s.BinDir, PluginBinary)
	has, err := hasBuildTag(plugin, FailpointsBuildTag)
	if err != nil {
		return Image{}, err
	}
	if !has {
		return Image{}, fmt.Errorf("%s was built without -tags %s; the failpoints image needs it (make images-failpoints builds it)", plugin, FailpointsBuildTag)
	}
	img, err := gpudraSpec(s, true)
	if err != nil {
		return Image{}, err
	}
	if img.Name, err = FailpointsImageName(s.ChartDir); err != nil {
		return Image{}, err
	}
	return img, nil
}

// hasBuildTag tells whether a Go binary was built with a build tag.
func hasBuildTag(binary, tag string) (bool, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return false, fmt.Errorf("read the Go build settings of %s: %w", binary, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), tag) {
			return true, nil
		}
	}
	return false, nil
}

// refuseFailpoints fails for a binary built with the failpoints tag: such a
// plugin kills itself on request and must never be the shipped image.
func refuseFailpoints(binary string) error {
	has, err := hasBuildTag(binary, FailpointsBuildTag)
	if err != nil {
		return err
	}
	if has {
		return fmt.Errorf("%s was built with -tags %s; only the failpoints image (%s) may carry it — rebuild it with make images",
			binary, FailpointsBuildTag, FailpointsTar)
	}
	return nil
}

// BuildFailpoints writes FailpointsTar into outDir.
func BuildFailpoints(outDir string, s Sources) (*Written, error) {
	img, err := FailpointsSpec(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FailpointsTar, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create the image directory: %w", err)
	}
	return Write(filepath.Join(outDir, FailpointsTar), img)
}
