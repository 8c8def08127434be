//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

func TestTwoGPUsOnOneNVLinkDomain(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("13-nvlink-pair.yaml"))
	waitRunning(t, ns, "nvlink-pair")
	d := assertSeesAllocation(t, ns, "nvlink-pair", "cuda")
	if len(d) != 2 || d[0].nvlinkDomain == "" || d[0].nvlinkDomain != d[1].nvlinkDomain || d[0].node != "gpu-mixed" {
		t.Errorf("want the NVLink-bridged A100 pair of gpu-mixed, got %+v", d)
	}
}

func TestGPUAndItsNUMANeighbour(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("14-gpu-and-numa-neighbour.yaml"))
	waitRunning(t, ns, "numa-neighbours")
	d := allocatedDevices(t, pod(t, ns, "numa-neighbours"))
	if len(d) != 2 || d[0].numaNode < 0 || d[0].numaNode != d[1].numaNode || d[0].uuid == d[1].uuid {
		t.Fatalf("want two GPUs on one NUMA node, got %+v", d)
	}
	// Each container sees only the GPU of its own request.
	seen := map[string]string{}
	for _, c := range []string{"model", "preprocess"} {
		gpus := containerGPUs(t, ns, "numa-neighbours", c)
		if len(gpus) != 1 {
			t.Fatalf("container %s sees %v, want one GPU", c, gpus)
		}
		seen[c] = gpus[0].UUID
	}
	if seen["model"] == seen["preprocess"] || !strings.HasPrefix(productOf(d, seen["model"]), "NVIDIA A100") {
		t.Fatalf("containers see %v, allocation %+v", seen, d)
	}
}

func productOf(devices []device, uuid string) string {
	for _, d := range devices {
		if d.uuid == uuid {
			return d.product
		}
	}
	return ""
}
