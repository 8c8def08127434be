package computedomain

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

func TestNodeClique(t *testing.T) {
	gpu := func(i int, f *model.Fabric) model.GPU {
		return model.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Fabric: f}
	}
	attached := func(i int, cluster string, clique uint32) model.GPU {
		return gpu(i, &model.Fabric{State: model.FabricCompleted, ClusterUUID: cluster, CliqueID: clique})
	}
	failed := attached(2, "c0", 9)
	failed.Fabric.Error = "Timeout"
	failedZero := gpu(3, &model.Fabric{State: model.FabricCompleted, Error: "Unknown Error"})
	for _, tc := range []struct {
		name    string
		gpus    []model.GPU
		want    string
		wantErr string
		pending bool
	}{
		{name: "no GPUs"},
		{name: "no fabric", gpus: []model.GPU{gpu(0, nil), gpu(1, nil)}},
		{name: "not supported", gpus: []model.GPU{gpu(0, &model.Fabric{State: model.FabricNotSupported})}},
		{name: "zero cluster UUID: NVLink inside the node only", gpus: []model.GPU{gpu(0, &model.Fabric{State: model.FabricCompleted})}},
		{name: "one clique", gpus: []model.GPU{attached(0, "c0", 7), attached(1, "c0", 7)}, want: "c0.7"},
		{name: "GPUs without fabric left out", gpus: []model.GPU{gpu(0, nil), attached(1, "c0", 7)}, want: "c0.7"},
		{name: "in progress", gpus: []model.GPU{attached(0, "c0", 7), gpu(1, &model.Fabric{State: model.FabricInProgress})},
			wantErr: "has not completed (gpu-1 GPU-b: in-progress)", pending: true},
		{name: "not started", gpus: []model.GPU{gpu(0, &model.Fabric{State: model.FabricNotStarted}),
			gpu(1, &model.Fabric{State: model.FabricInProgress})},
			wantErr: "(gpu-0 GPU-a: not-started; gpu-1 GPU-b: in-progress)", pending: true},
		{name: "a state NVML adds later is not final", gpus: []model.GPU{gpu(0, &model.Fabric{State: "state-7"})},
			wantErr: "gpu-0 GPU-a: state-7", pending: true},
		{name: "completed with an error status", gpus: []model.GPU{attached(0, "c0", 9), failed},
			wantErr: "registration failed (gpu-2 GPU-c: Timeout): no clique can be published for this node; check the NVIDIA Fabric Manager (the nvidia-fabricmanager service"},
		{name: "an error status with a zero cluster UUID", gpus: []model.GPU{failedZero}, wantErr: "(gpu-3 GPU-d: Unknown Error)"},
		{name: "a failure wins over a pending GPU", gpus: []model.GPU{gpu(0, &model.Fabric{State: model.FabricInProgress}), failed},
			wantErr: "registration failed (gpu-2 GPU-c: Timeout)"},
		{name: "two cliques", gpus: []model.GPU{attached(0, "c0", 7), attached(1, "c0", 8)}, wantErr: "in 2 NVLink cliques (c0.7, c0.8)"},
		{name: "two clusters", gpus: []model.GPU{attached(0, "c0", 7), attached(1, "c1", 7)}, wantErr: "in 2 NVLink cliques (c0.7, c1.7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeClique(tc.gpus)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.Equal(t, tc.pending, errors.Is(err, ErrFabricPending), "pending: %v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
