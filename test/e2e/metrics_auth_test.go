//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// metricsAuthValue turns on the plugin's authenticated /metrics.
const metricsAuthValue = "kubeletPlugin.metrics.authentication=true"

// TestPluginMetricsAuthentication installs the chart with
// kubeletPlugin.metrics.authentication=true and reads a plugin's metrics
// port from the host (the pod IP) over HTTPS: /metrics refuses a request
// without a token (401) and the token of a ServiceAccount without the
// chart's metrics-reader ClusterRole (403), and answers one bound to it
// (200, gpudra metrics); /healthz and /readyz answer without a token (the
// kubelet's probes, switched to HTTPS, kept the pods ready through the
// install); plain HTTP is refused. `gpudra status` says in one line that
// the telemetry needs a token and still lists the GPUs.
func TestPluginMetricsAuthentication(t *testing.T) {
	ctx := context.Background()
	const node = "gpu-h100"
	if err := realCluster.InstallDriver(ctx, metricsAuthValue); err != nil {
		t.Fatalf("helm upgrade with %s: %v", metricsAuthValue, err)
	}
	t.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("helm upgrade back to the default values: %v", err)
		}
	})
	url := pluginMetricsURL(t, node)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("plugin metrics URL %s: want https (the pod has no --metrics-secure?)", url)
	}
	base := strings.TrimSuffix(url, "/metrics")

	ns := namespace(t)
	reader := serviceAccountToken(t, ns, "metrics-reader")
	outsider := serviceAccountToken(t, ns, "outsider")
	role := metricsReaderRole(t)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "metrics-reader"}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	httpsClient := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the plugin's certificate is self-signed
	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"metrics without a token", "/metrics", "", http.StatusUnauthorized},
		{"metrics with a forged token", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"metrics of a ServiceAccount without the role", "/metrics", outsider, http.StatusForbidden},
		{"healthz without a token", "/healthz", "", http.StatusOK},
		{"readyz without a token", "/readyz", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := getWithToken(t, httpsClient, base+tc.path, tc.token); code != tc.want {
				t.Errorf("GET %s: %d, want %d:\n%s", tc.path, code, tc.want, body)
			}
		})
	}
	t.Run("metrics of a ServiceAccount bound to the role", func(t *testing.T) {
		// The binding reaches the API server's RBAC cache within moments; a
		// refusal before that is cached by the plugin for 30s.
		var code int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
			code, body = getWithToken(t, httpsClient, url, reader)
			return code == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("GET /metrics with the reader's token: %d, want 200:\n%s", code, body)
		}
		if !strings.Contains(body, "gpudra_plugin_prepared_claims") {
			t.Errorf("the answer holds no gpudra metrics:\n%.2000s", body)
		}
	})
	t.Run("plain HTTP is refused", func(t *testing.T) {
		code, body := getWithToken(t, http.DefaultClient, "http"+strings.TrimPrefix(base, "https")+"/healthz", "")
		if code == http.StatusOK {
			t.Errorf("plain HTTP answered 200: %s", body)
		}
	})
	t.Run("gpudra status", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(repoRoot, "_output", "bin", "gpudra"), "status", "--kubeconfig", kubeconfig, "--node", node).CombinedOutput()
		if err != nil {
			t.Fatalf("gpudra status: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), "needs a bearer token"); n != 1 {
			t.Errorf("gpudra status says %d times that the telemetry needs a token, want once:\n%s", n, out)
		}
		if !strings.Contains(string(out), node+" ") {
			t.Errorf("gpudra status lists no device of %s:\n%s", node, out)
		}
	})
}

// serviceAccountToken creates a ServiceAccount in ns and returns a
// short-lived token of it (TokenRequest).
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// metricsReaderRole is the name of the installed release's metrics-reader
// ClusterRole.
func metricsReaderRole(t *testing.T) string {
	t.Helper()
	roles, err := client.RbacV1().ClusterRoles().List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + realCluster.Config().Release})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		if strings.HasSuffix(r.Name, "-kubelet-plugin-metrics-reader") {
			return r.Name
		}
	}
	t.Fatalf("the release %s has no *-kubelet-plugin-metrics-reader ClusterRole", realCluster.Config().Release)
	return ""
}

func getWithToken(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// TestHelmPluginMetricsRBAC installs the plugin's identity as the chart
// renders it with and without kubeletPlugin.metrics.authentication and asks
// the API server what the plugin may do: create TokenReviews and
// SubjectAccessReviews only when on. The metrics-reader ClusterRole grants
// get on /metrics and nothing else.
func TestHelmPluginMetricsRBAC(t *testing.T) {
	skipWithoutHelm(t)
	reviews := []string{"authentication.k8s.io/tokenreviews create ", "authorization.k8s.io/subjectaccessreviews create "}
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("authentication=%t", on), func(t *testing.T) {
			ns := namespace(t)
			release := fmt.Sprintf("metricsrbac%05d", rand.IntN(100000))
			name := release + "-gpudra-kubelet-plugin"
			var objs []*unstructured.Unstructured
			for _, o := range helmTemplate(t, release, ns, "--set", fmt.Sprintf("kubeletPlugin.metrics.authentication=%t", on)) {
				switch o.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
					if o.GetName() == name {
						objs = append(objs, o)
					}
				}
			}
			if len(objs) != 3 {
				t.Fatalf("found %d plugin identity objects named %s, want 3", len(objs), name)
			}
			path := writeList(t, objs)
			if out, err := kubectl("apply", "-f", path); err != nil {
				t.Fatalf("install the plugin's RBAC: %v\n%s", err, out)
			}
			t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "--wait=false", "-f", path) })
			got, _ := rules(t, "system:serviceaccount:"+ns+":"+name, ns)
			for _, r := range reviews {
				if slices.Contains(got, r) != on {
					t.Errorf("with authentication=%t the plugin may %q: %t; its rules:\n  %s", on, r, !on, strings.Join(got, "\n  "))
				}
			}
		})
	}
}
