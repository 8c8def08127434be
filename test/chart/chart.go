// Package chart renders the Helm chart for unit tests that check what it
// installs (helm template, no cluster). The helm binary is the one make
// builds, _output/tools/helm; without it the tests are skipped, as the
// chart's other offline tests are (make helm-lint builds it).
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpudra/gpudra/test/repo"
)

// Dir is the chart, relative to the repository root.
const Dir = "deployments/helm/gpudra"

// Object is one rendered object.
type Object = map[string]any

// Render runs helm template on the chart with release gpudra in namespace
// gpudra-system and the extra arguments (e.g. --set compatibility=nvidia,
// --show-only templates/x.yaml), and returns the objects. It skips the test
// when _output/tools/helm is missing and fails it when helm fails.
func Render(t testing.TB, args ...string) []Object {
	t.Helper()
	objs, err := RenderErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// RenderErr is Render for a chart that may refuse the values: helm's error
// (with its message) is returned, not fatal.
func RenderErr(t testing.TB, args ...string) ([]Object, error) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "_output", "tools", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no helm (%v): make %s builds it", err, helm)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, append([]string{"template", "gpudra", filepath.Join(root, Dir),
		"--namespace", "gpudra-system"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %v: %w\n%s", args, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []Object
	for {
		var o Object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			t.Fatalf("decode the rendered chart: %v", err)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
}

// OfKind returns the rendered objects of a kind.
func OfKind(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
	return out
}
