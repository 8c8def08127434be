//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/test/localcluster"
)

// An API-server-only run (make policy-versions): E2E_APISERVER_ONLY names
// a kube-apiserver binary of another Kubernetes version; the suite starts
// etcd and that API server only, with the objects the policy tests read
// from a real cluster made by hand (fixtureNode's ResourceSlice, the GPU
// DeviceClass, an allocated claim), and runs the tests that need nothing
// else: the chart's admission policies and RBAC as that version's API server
// evaluates them.
var apiserverOnly bool

// fixtureNode is the node of the hand-made ResourceSlice and claim.
const fixtureNode = "policy-node"

// apiserverOnlyGates are the feature gates of the API-server-only run
// (E2E_FEATURE_GATES overrides them): the DRA features gpudra's docs tell
// operators of 1.34 and 1.35 to enable.
const apiserverOnlyGates = "DRAExtendedResource=true,DRAPartitionableDevices=true,DRAConsumableCapacity=true"

func upAPIServerOnly(bin string) (func(), error) {
	apiserverOnly = true
	gates := apiserverOnlyGates
	if g, ok := os.LookupEnv("E2E_FEATURE_GATES"); ok {
		gates = g
	}
	dir := filepath.Join(repoRoot, "_output", "localcluster-"+filepath.Base(bin))
	cfg := localcluster.APIServerOnlyConfig(repoRoot, dir, bin, gates)
	realCluster = localcluster.New(cfg, os.Stderr)
	ctx := context.Background()
	if err := realCluster.Up(ctx); err != nil {
		return nil, fmt.Errorf("API server %s up: %w", bin, err)
	}
	clusterDir, kubeconfig = cfg.Dir, realCluster.AdminKubeconfig()
	down := func() {
		if err := realCluster.Down(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if err := makeFixtures(ctx); err != nil {
		down()
		return nil, err
	}
	return down, nil
}

// makeFixtures creates the GPU DeviceClass and a ResourceSlice of
// fixtureNode, as the controller and a plugin would.
func makeFixtures(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	for _, class := range deviceclass.BaseClasses("") {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("fixture DeviceClass %s: %w", class.Name, err)
		}
	}
	node := fixtureNode
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0"}}}}
	if _, err := c.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("fixture ResourceSlice: %w", err)
	}
	return nil
}

// fixtureClaim creates a claim in ns allocated to gpu-0 of fixtureNode, as
// the scheduler would, and returns its name.
func fixtureClaim(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "status-writer"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass(t)}}}}}}
	claim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("fixture claim: %v", err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: driver, Pool: fixtureNode, Device: "gpu-0"}}},
		NodeSelector: nodeSelectorFor(fixtureNode),
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "status-writer", UID: "0f0e0d0c-0b0a-4908-8706-050403020100"}}
	if _, err := client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("allocate the fixture claim: %v", err)
	}
	return claim.Name
}

// nodeSelectorFor selects one node by name, as the scheduler's allocation
// of a node-local device does.
func nodeSelectorFor(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
}
