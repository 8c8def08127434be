//go:build tools

// Package tools pins the CRI-O command hack/build-crio.sh builds (its pinns
// helper is C in the same module and is built from the module cache).
package tools

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
