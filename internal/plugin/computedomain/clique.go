package computedomain

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// ErrFabricPending is wrapped by NodeClique's error while a GPU's NVLink
// fabric registration has not completed (not-started, in-progress): the
// node's clique is not known yet, and reading NVML again later tells it.
var ErrFabricPending = errors.New("NVLink fabric registration of the node's GPUs has not completed")

// NodeClique is the NVLink clique of a node's GPUs (DeviceOptions.CliqueID):
// the one clique of the GPUs attached to a multi-node fabric, empty when
// none is (no fabric, NVML's not-supported state, or a completed
// registration with a zero cluster UUID: NVLink inside the node only).
// As NVIDIA's driver does, it gives no answer for a node whose fabric
// answer is not final or failed: a GPU whose registration has not completed
// yields an error wrapping ErrFabricPending, a GPU whose registration
// completed with an error status an error naming it; GPUs in two cliques
// are an error too, since a node's IMEX daemon serves one.
func NodeClique(gpus []model.GPU) (string, error) {
	var cliques, pending, failed []string
	for _, g := range gpus {
		f := g.Fabric
		switch {
		case f == nil || f.State == model.FabricNotSupported:
		case f.State != model.FabricCompleted:
			pending = append(pending, gpuName(g)+": "+string(f.State))
		case f.Error != "":
			failed = append(failed, gpuName(g)+": "+f.Error)
		case f.Clique() != "" && !slices.Contains(cliques, f.Clique()):
			cliques = append(cliques, f.Clique())
		}
	}
	switch {
	case len(failed) > 0:
		return "", fmt.Errorf("NVLink fabric registration failed (%s): no clique can be published for this node; "+
			"check the NVIDIA Fabric Manager (the nvidia-fabricmanager service and its log) and the node's NVLink connections "+
			"(nvidia-smi -q, section Fabric)", strings.Join(failed, "; "))
	case len(pending) > 0:
		return "", fmt.Errorf("%w (%s)", ErrFabricPending, strings.Join(pending, "; "))
	}
	switch len(cliques) {
	case 0:
		return "", nil
	case 1:
		return cliques[0], nil
	}
	return "", fmt.Errorf("the node's GPUs are in %d NVLink cliques (%s): one node's IMEX daemon serves one clique; "+
		"check the fabric manager's partitions for this node", len(cliques), strings.Join(cliques, ", "))
}

// gpuName names a GPU in messages: its device name and UUID.
func gpuName(g model.GPU) string {
	return fmt.Sprintf("gpu-%d %s", g.Index, g.UUID)
}
