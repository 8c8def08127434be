package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/controller/certs"
	"github.com/gpudra/gpudra/internal/controller/computedomain"
	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/internal/controller/webhook"
)

const (
	waitFor = 20 * time.Second
	tick    = 20 * time.Millisecond
)

func fastLeaderElection(o *Options) {
	o.LeaseDuration, o.LeaseRenewDeadline, o.LeaseRetryPeriod = 2*time.Second, time.Second, 100*time.Millisecond
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // test URL on localhost
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestRunEndToEnd starts the whole controller on a fake API server: it must
// become ready, issue a certificate the webhook configuration trusts, deny
// bad parameters over TLS, create the DeviceClasses and export its metrics.
func TestRunEndToEnd(t *testing.T) {
	h100 := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.gpudra.io", NodeName: ptr.To("node-a"),
			Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr.To("gpu")}, "productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}}}}},
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gpudra-controller"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "claimparameters.gpu.gpudra.io"}},
	}
	client := fake.NewClientset(h100, vwc)
	opts := defaultOptions(t, "--namespace=gpudra-system", "--extended-resource-name=nvidia.com/gpu")
	fastLeaderElection(opts)
	webhookLn, metricsLn := listen(t), listen(t)
	metricsURL := "http://" + metricsLn.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	// The ComputeDomain controller is on (the default) while the fake API
	// server serves no ComputeDomain CRD: it must wait without disturbing
	// the DeviceClasses (computeDomains.installCRDs=false).
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	go func() { done <- run(ctx, opts, clients{kube: client, dyn: dyn}, webhookLn, metricsLn) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	require.Eventually(t, func() bool { code, _ := httpGet(t, metricsURL+"/readyz"); return code == 200 }, waitFor, tick)
	code, body := httpGet(t, metricsURL+"/healthz")
	assert.Equal(t, 200, code, body)
	assert.Contains(t, body, "leader-election ok")

	// The webhook answers over TLS with a certificate the caBundle trusts.
	var caBundle []byte
	require.Eventually(t, func() bool {
		got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "gpudra-controller", metav1.GetOptions{})
		caBundle = got.Webhooks[0].ClientConfig.CABundle
		return err == nil && len(caBundle) > 0
	}, waitFor, tick)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caBundle))
	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "gpudra-controller.gpudra-system.svc", MinVersion: tls.VersionTLS12}}}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Namespace: "default", Name: "bad",
			Kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
			Object: runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"bad"},"spec":{"devices":{"config":[{"requests":["gpu"],` +
				`"opaque":{"driver":"gpu.gpudra.io","parameters":{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Sometimes"}}}}]}}}`)}},
	}
	data, err := json.Marshal(review)
	require.NoError(t, err)
	resp, err := httpsClient.Post("https://"+webhookLn.Addr().String()+webhook.Path, "application/json", bytes.NewReader(data))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, 200, resp.StatusCode)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	assert.False(t, out.Response.Allowed)
	assert.Contains(t, out.Response.Result.Message, `ResourceClaim default/bad: spec.devices.config[0] (requests: gpu): invalid GpuClaimParameters`)

	// The leader keeps the DeviceClasses.
	for _, name := range []string{deviceclass.GPUClassName, deviceclass.MIGClassName, "h100-80gb-hbm3.gpu.gpudra.io"} {
		require.Eventually(t, func() bool {
			_, err := client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
			return err == nil
		}, waitFor, tick, name)
	}
	gpu, err := client.ResourceV1().DeviceClasses().Get(ctx, deviceclass.GPUClassName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ptr.To("nvidia.com/gpu"), gpu.Spec.ExtendedResourceName)
	lease, err := client.CoordinationV1().Leases("gpudra-system").Get(ctx, "gpudra-controller", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, ptr.Deref(lease.Spec.HolderIdentity, ""))

	_, metrics := httpGet(t, metricsURL+"/metrics")
	for _, want := range []string{
		IsLeaderMetric + " 1",
		CertExpiryMetric + " ",
		webhook.DecisionsMetric + `{decision="denied",kind="ResourceClaim"} 1`,
		"go_goroutines ",
		computedomain.MetricServed + " 0",
	} {
		assert.Contains(t, metrics, want)
	}
}

// TestOnlyTheLeaderWorks runs two replicas against one API server: one runs
// the leader work, and the other takes over when the first stops.
func TestOnlyTheLeaderWorks(t *testing.T) {
	client := fake.NewClientset()
	opts := defaultOptions(t, "--namespace=gpudra-system")
	fastLeaderElection(opts)
	var leading atomic.Int32
	var mu sync.Mutex
	var leaders []string
	replica := func(name string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- runElected(ctx, client, opts, nil, func(ctx context.Context) {
				if n := leading.Add(1); n > 1 {
					t.Errorf("%d replicas lead at once", n)
				}
				mu.Lock()
				leaders = append(leaders, name)
				mu.Unlock()
				<-ctx.Done()
				leading.Add(-1)
			})
		}()
		return cancel, done
	}
	cancelA, doneA := replica("a")
	require.Eventually(t, func() bool { return leading.Load() == 1 }, waitFor, tick)
	cancelB, doneB := replica("b")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	assert.Equal(t, []string{"a"}, leaders)
	mu.Unlock()

	cancelA()
	require.NoError(t, <-doneA)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(leaders, ",") == "a,b" && leading.Load() == 1
	}, waitFor, tick, "b takes over after a released the lease")
	cancelB()
	require.NoError(t, <-doneB)
}

// TestFilesModeWithoutLeaderElection serves certificate files and reports
// not ready until they exist.
func TestFilesModeWithoutLeaderElection(t *testing.T) {
	dir := t.TempDir()
	opts := defaultOptions(t, "--namespace=ns", "--leader-elect=false", "--cert-mode=files",
		"--cert-file="+dir+"/tls.crt", "--key-file="+dir+"/tls.key", "--cert-file-check-interval=50ms", "--manage-device-classes=false")
	metricsLn := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- run(ctx, opts, clients{kube: fake.NewClientset()}, listen(t), metricsLn) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	url := "http://" + metricsLn.Addr().String() + "/readyz"
	require.Eventually(t, func() bool { code, _ := httpGet(t, url); return code == 500 }, waitFor, tick)
	_, body := httpGet(t, url)
	assert.Contains(t, body, "no webhook serving certificate loaded yet (--cert-mode=files")

	b, err := certs.Generate([]string{"x.ns.svc"}, time.Now(), time.Hour, nil)
	require.NoError(t, err)
	require.NoError(t, writeFile(dir+"/tls.crt", b.CertPEM))
	require.NoError(t, writeFile(dir+"/tls.key", b.KeyPEM))
	require.Eventually(t, func() bool { code, _ := httpGet(t, url); return code == 200 }, waitFor, tick)
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }
