package controller

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
)

// TestStaticClassIsAdopted applies deployments/static (the chart's choice
// without a controller), then runs the DeviceClass controller: it must adopt
// the class as it is (no update, no NameConflict event), so a cluster that
// starts with the static class and gets the controller later keeps one
// consistent gpu.gpudra.io class.
func TestStaticClassIsAdopted(t *testing.T) {
	data, err := os.ReadFile("../../deployments/static/deviceclasses.yaml")
	require.NoError(t, err)
	var static resourceapi.DeviceClass
	require.NoError(t, yaml.UnmarshalStrict(data, &static))
	assert.Equal(t, deviceclass.ManagedByValue, static.Labels[deviceclass.ManagedByLabel],
		"without the managed-by label the controller reports a NameConflict instead of adopting the class")

	static.ResourceVersion = "1"
	client := fake.NewClientset(&static)
	factory := informers.NewSharedInformerFactory(client, 0)
	recorder := events.NewFakeRecorder(10)
	ctrl, err := deviceclass.New(client, factory, recorder, deviceclass.Options{ExtendedResourceName: "nvidia.com/gpu"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, ctrl.Run(ctx)) })
	defer func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	}()

	// The mig class is created by the same sync pass that checks the gpu one.
	require.Eventually(t, func() bool {
		_, err := client.ResourceV1().DeviceClasses().Get(ctx, deviceclass.MIGClassName, metav1.GetOptions{})
		return err == nil
	}, waitFor, tick)
	time.Sleep(200 * time.Millisecond) // let both workers finish
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "deviceclasses" {
			assert.NotContains(t, []string{"update", "patch", "delete"}, a.GetVerb(), "unexpected %s of a DeviceClass", a.GetVerb())
		}
	}
	got, err := client.ResourceV1().DeviceClasses().Get(ctx, deviceclass.GPUClassName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1", got.ResourceVersion, "the static class is adopted unchanged")
	select {
	case ev := <-recorder.Events:
		t.Errorf("unexpected event: %s", ev)
	default:
	}
}
