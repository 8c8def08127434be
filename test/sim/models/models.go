// Package models holds the simulator's GPU model catalogue (*.yaml here):
// test/sim validates and simulates them, and the GPU verification kit
// (test/fidelity) reads their names, product names and `nvml:` mappings to
// tell which rows of docs/nvml-fidelity.md apply to a real GPU, without
// linking the simulator.
package models

import "embed"

// Files are the catalogue's YAML files, at the root of the FS.
//
//go:embed *.yaml
var Files embed.FS
