// Package docs embeds the documents that programs read: the GPU
// verification kit (test/gpuverify) checks the rows of the NVML fidelity
// table on a real GPU. The table is embedded from here, its only copy, so
// that the kit (copied alone to a GPU machine) carries the table it was
// built with and no copy can fall behind the document.
package docs

import _ "embed"

// NVMLFidelity is nvml-fidelity.md.
//
//go:embed nvml-fidelity.md
var NVMLFidelity []byte
