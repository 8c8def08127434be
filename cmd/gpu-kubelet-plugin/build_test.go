package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The shipped build (Makefile SHIP_BUILD_FLAGS, Dockerfile) leaves out
// every package that executes templates: reflection on methods by name
// there makes the linker keep all exported methods of all types, 16 MB of
// the plugin's code and about 10 MiB of its idle RSS. gRPC's request tracing
// was the one that did (hence -tags grpcnotrace); this fails when a new
// dependency brings one back.
func TestShippedBuildLinksNoTemplateExecution(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch pkg {
		case "html/template", "golang.org/x/net/trace":
			t.Errorf("the plugin links %s; find the importer with go list -deps -f '{{.ImportPath}}: {{.Imports}}' -tags grpcnotrace ./cmd/gpu-kubelet-plugin", pkg)
		}
	}
}
