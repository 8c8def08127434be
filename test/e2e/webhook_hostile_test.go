//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/controller/webhook"
	"github.com/gpudra/gpudra/test/localcluster"
)

// TestWebhookHostileKinds plays the attack of issue 24 against the
// installed chart's controller: anyone who reaches its webhook port sends
// AdmissionReviews with made-up, long kinds. Every one is answered, and the
// decision counter keeps its known kind labels (they count as "other")
// instead of a series, and its memory, per kind.
func TestWebhookHostileKinds(t *testing.T) {
	keepFailure(t)
	lockControllerTests(t)
	pod := runningControllerPod(t)
	webhookURL := fmt.Sprintf("https://%s:%d%s", pod.Status.PodIP, containerPort(t, pod, "webhook"), webhook.Path)
	metricsURL := fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, containerPort(t, pod, "metrics"))
	// The attacker does not verify the serving certificate either.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	const kinds, kindBytes = 40, 64 << 10
	for i := range kinds {
		kind := fmt.Sprintf("Hostile%d%s", i, strings.Repeat("x", kindBytes))
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: types.UID(fmt.Sprintf("hostile-%d", i)), Operation: admissionv1.Create,
				Kind: metav1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: kind}},
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Post(webhookURL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST review %d to %s: %v", i, webhookURL, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("review %d: %s, want 200 (an allowed review)", i, resp.Status)
		}
	}

	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatalf("GET %s: %v", metricsURL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	metrics, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{webhook.KindResourceClaim: true, webhook.KindResourceClaimTemplate: true, webhook.KindDeviceClass: true,
		webhook.KindOther: true, webhook.KindUnknown: true}
	series := regexp.MustCompile(`(?m)^`+webhook.DecisionsMetric+`\{[^}]*kind="([^"]*)"[^}]*\} \S+$`).FindAllSubmatch(metrics, -1)
	if len(series) == 0 {
		t.Fatalf("no %s series in %s", webhook.DecisionsMetric, metricsURL)
	}
	for _, m := range series {
		if !known[string(m[1])] {
			t.Errorf("%s has a kind label from a request (%d bytes): the counter grows with every made-up kind",
				webhook.DecisionsMetric, len(m[1]))
		}
	}
	if !bytes.Contains(metrics, []byte(`kind="`+webhook.KindOther+`"`)) {
		t.Errorf("the hostile reviews are not counted as kind %q", webhook.KindOther)
	}
}

// runningControllerPod is a running pod of the chart's controller.
func runningControllerPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods(realCluster.Config().Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: localcluster.ControllerLabelSelector})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			return p
		}
	}
	t.Fatalf("no running controller pod (%s)", localcluster.ControllerLabelSelector)
	return nil
}

func containerPort(t *testing.T, p *corev1.Pod, name string) int32 {
	t.Helper()
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return port.ContainerPort
			}
		}
	}
	t.Fatalf("controller pod %s has no port named %s", p.Name, name)
	return 0
}
