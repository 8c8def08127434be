// Package controller wires gpudra's gpu-controller: the validating admission
// webhook for GpuClaimParameters (served by every replica, so that admission
// never waits for a leader), its serving certificate, and, on the elected
// leader only, the DeviceClass controller and the rotation of a self-managed
// certificate. A metrics and health server exposes /metrics, /healthz and
// /readyz (ready once the certificate is loaded and the watches that feed it
// have synced).
package controller

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/controller/certs"
	"github.com/gpudra/gpudra/internal/controller/computedomain"
	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/internal/controller/webhook"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

// Certificate modes.
const (
	CertModeSelfManaged = "self-managed"
	CertModeSecret      = "secret"
	CertModeFiles       = "files"
)

var certModes = []string{CertModeSelfManaged, CertModeSecret, CertModeFiles}

// Options are the gpu-controller's settings.
type Options struct {
	Kubeconfig   string
	KubeAPIQPS   float32
	KubeAPIBurst int
	Namespace    string

	LeaderElect         bool
	LeaseName           string
	LeaseNamespace      string
	LeaseDuration       time.Duration
	LeaseRenewDeadline  time.Duration
	LeaseRetryPeriod    time.Duration
	WebhookPort         int
	WebhookServiceName  string
	WebhookConfigName   string
	CertMode            string
	CertSecretName      string
	CertExtraSANs       []string
	CertValidity        time.Duration
	CertRotateBefore    time.Duration
	CertCheckInterval   time.Duration
	CertFile            string
	KeyFile             string
	CertFileInterval    time.Duration
	MetricsPort         int
	ManageDeviceClasses bool
	// ComputeDomains runs the ComputeDomain controller (leader only) while
	// a ComputeDomain CRD is served; ComputeDomainImage is its IMEX daemons'
	// image (empty: no DaemonSets).
	ComputeDomains     bool
	ComputeDomainImage string
	// ComputeDomainNudgeAfter is when an IMEX daemon pod whose sandbox the
	// kubelet has not created gets its first nudge; 0: none.
	ComputeDomainNudgeAfter time.Duration
	PerModelClasses         bool
	// ExtendedResourceName for the gpu.gpudra.io class; empty leaves it out.
	ExtendedResourceName string
	// PerProfileMIGClasses keeps one class per MIG profile; each gets the
	// extended resource MIGExtendedResourcePrefix+profile when the prefix is set.
	PerProfileMIGClasses      bool
	MIGExtendedResourcePrefix string
	// MaxDerivedClasses bounds the per-model and per-profile classes
	// together; 0: no bound.
	MaxDerivedClasses int
	// DriverName is the driver whose classes and configurations the
	// controller serves; Compatibility (--compatibility=nvidia) makes it
	// gpu.nvidia.com. Validate resolves both into names, once.
	DriverName    string
	Compatibility string
	// Passthrough (--passthrough, chart kubeletPlugin.passthrough): keep the
	// vfio DeviceClass and admit VfioDeviceConfig, as the plugins publish
	// vfio devices.
	Passthrough bool
	names       compat.Names
	// validated: Validate has succeeded, so Run does not resolve again.
	validated bool
}

// EnvVars are the flags the chart's Deployment sets from the downward API
// (POD_NAMESPACE), and KUBECONFIG, which every Kubernetes client reads. The
// command applies them with envflag.Bind: a flag given on the command line
// wins.
var EnvVars = []envflag.Var{{Flag: "namespace", Env: "POD_NAMESPACE"}, {Flag: "kubeconfig", Env: "KUBECONFIG"}}

// Names are the names of the driver the controller serves, as Validate
// resolved them from --compatibility and --driver-name.
func (o *Options) Names() compat.Names { return o.names }

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Kubeconfig file; in-cluster config when empty. [$KUBECONFIG]")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 20, "Client-side QPS limit towards the API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 40, "Client-side burst towards the API server.")
	fs.StringVar(&o.Namespace, "namespace", "",
		"Namespace the controller runs in: where its certificate Secret and lease live. [$POD_NAMESPACE]")

	fs.BoolVar(&o.LeaderElect, "leader-elect", true,
		"Elect a leader among the replicas; only the leader manages DeviceClasses and rotates the certificate. Every replica serves the webhook.")
	fs.StringVar(&o.LeaseName, "leader-elect-lease-name", "gpudra-controller", "Name of the Lease used for leader election.")
	fs.StringVar(&o.LeaseNamespace, "leader-elect-lease-namespace", "", "Namespace of the Lease; --namespace when empty.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before taking over an unrenewed lease.")
	fs.DurationVar(&o.LeaseRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before giving up leadership.")
	fs.DurationVar(&o.LeaseRetryPeriod, "leader-elect-retry-period", 2*time.Second, "Interval between attempts to acquire or renew the lease.")

	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "HTTPS port of the admission webhook (path "+webhook.Path+").")
	fs.StringVar(&o.WebhookServiceName, "webhook-service-name", "gpudra-controller",
		"Service in front of the webhook; the self-managed certificate is issued for <service>.<namespace>.svc.")
	fs.StringVar(&o.WebhookConfigName, "webhook-configuration-name", "gpudra-controller",
		"ValidatingWebhookConfiguration whose caBundle the self-managed mode maintains.")
	fs.StringVar(&o.CertMode, "cert-mode", CertModeSelfManaged,
		"Where the webhook's serving certificate comes from: self-managed (generated, stored in --cert-secret-name, rotated, caBundle patched), "+
			"secret (an existing kubernetes.io/tls Secret, e.g. from cert-manager, which also injects the caBundle), or files (--cert-file/--key-file).")
	fs.StringVar(&o.CertSecretName, "cert-secret-name", "gpudra-webhook-tls", "Secret with tls.crt/tls.key (cert modes self-managed and secret).")
	fs.StringSliceVar(&o.CertExtraSANs, "cert-extra-sans", nil,
		"Additional DNS names or IP addresses for the self-managed certificate; an IP (e.g. 127.0.0.1 for a webhook configured with clientConfig.url) becomes an IP SAN.")
	fs.DurationVar(&o.CertValidity, "cert-validity", certs.DefaultValidity, "Validity of self-managed certificates.")
	fs.DurationVar(&o.CertRotateBefore, "cert-rotate-before", certs.DefaultRotateBefore, "Renew a self-managed certificate this long before it expires.")
	fs.DurationVar(&o.CertCheckInterval, "cert-check-interval", certs.DefaultCheckInterval, "How often the leader checks the self-managed certificate.")
	fs.StringVar(&o.CertFile, "cert-file", "", "Serving certificate in PEM (cert mode files); re-read when it changes.")
	fs.StringVar(&o.KeyFile, "key-file", "", "Serving key in PEM (cert mode files); re-read when it changes.")
	fs.DurationVar(&o.CertFileInterval, "cert-file-check-interval", certs.DefaultFileCheckInterval,
		"How often --cert-file and --key-file are checked for changes (cert mode files).")

	fs.IntVar(&o.MetricsPort, "metrics-port", 8080, "HTTP port for /metrics, /healthz and /readyz.")
	fs.StringVar(&o.DriverName, "driver-name", v1alpha1.DriverName, "DRA driver whose DeviceClasses and opaque configurations the controller serves.")
	fs.StringVar(&o.Compatibility, "compatibility", "",
		"nvidia: serve NVIDIA's DRA driver API (driver gpu.nvidia.com, classes gpu.nvidia.com and mig.nvidia.com, "+
			"resource.nvidia.com/v1beta1 GpuConfig and MigDeviceConfig); empty for gpudra's own names.")
	fs.BoolVar(&o.Passthrough, "passthrough", false,
		"GPU passthrough is on in the kubelet plugins: keep the vfio DeviceClass (vfio.gpu.gpudra.io, vfio.gpu.nvidia.com in NVIDIA "+
			"compatibility mode) and admit VfioDeviceConfig.")
	fs.BoolVar(&o.ManageDeviceClasses, "manage-device-classes", true, "Keep the gpu.gpudra.io and mig.gpudra.io DeviceClasses (leader only).")
	fs.BoolVar(&o.ComputeDomains, "compute-domains", true,
		"Run the ComputeDomain controller (leader only): each ComputeDomain's channel ResourceClaimTemplate, IMEX daemon DaemonSet "+
			"and status. It waits without failing while no ComputeDomain CRD is installed.")
	fs.StringVar(&o.ComputeDomainImage, "compute-domain-daemon-image", "",
		"Image of the IMEX daemon pods the ComputeDomain controller creates (the chart sets the gpudra image); "+
			"empty: no IMEX DaemonSets are created (templates and status still are).")
	fs.DurationVar(&o.ComputeDomainNudgeAfter, "compute-domain-daemon-nudge-after", DefaultComputeDomainNudgeAfter,
		"How long after its scheduling an IMEX daemon pod whose sandbox its kubelet has not created (its DRA prepare failed) gets "+
			"an annotation change that makes the kubelet sync it, and so retry the prepare, at once; then after twice as long each "+
			"time, "+strconv.Itoa(computedomain.MaxNudges)+" times at most. The kubelet itself retries a failed prepare only at its "+
			"periodic resync, after 60 to 90 seconds (kubernetes#139836). 0: no nudges.")
	fs.BoolVar(&o.PerModelClasses, "per-model-classes", true,
		"Also keep one DeviceClass per GPU model found in ResourceSlices, e.g. h100-80gb-hbm3.gpu.gpudra.io.")
	fs.StringVar(&o.ExtendedResourceName, "extended-resource-name", "",
		"Extended resource served through the gpu.gpudra.io class (e.g. nvidia.com/gpu, so device-plugin style pods get DRA GPUs); empty for none.")
	fs.BoolVar(&o.PerProfileMIGClasses, "per-profile-mig-classes", true,
		"Also keep one DeviceClass per MIG profile found in ResourceSlices, e.g. 1g.10gb.mig.gpudra.io.")
	fs.StringVar(&o.MIGExtendedResourcePrefix, "mig-extended-resource-prefix", "",
		"With --per-profile-mig-classes: each MIG profile class serves the extended resource <prefix><profile> "+
			"(nvidia.com/mig- gives nvidia.com/mig-1g.10gb, the device plugin's names; a profile's + becomes .); empty for none.")
	fs.IntVar(&o.MaxDerivedClasses, "max-derived-classes", DefaultMaxDerivedClasses,
		"Most per-model and per-profile MIG DeviceClasses kept together: their names come from what plugins publish. "+
			"Models and profiles beyond it get no class (logged, a Warning event on a slice, metric "+deviceclass.MetricClassesCapped+"); 0 for no limit.")
}

// DefaultMaxDerivedClasses is --max-derived-classes' default: far more GPU
// models and MIG profiles than a cluster has (a MIG-capable model has fewer
// than ten profiles).
const DefaultMaxDerivedClasses = 64

// DefaultComputeDomainNudgeAfter is --compute-domain-daemon-nudge-after's
// default: the node authorizer's race that fails a daemon pod's first claim
// read lasts milliseconds, and a daemon pod that prepares normally has its
// sandbox within a second or two.
const DefaultComputeDomainNudgeAfter = 5 * time.Second

// validateOnce runs Validate unless it has succeeded before, so that the
// names are resolved once however many entry points check the options.
func (o *Options) validateOnce() error {
	if o.validated {
		return nil
	}
	return o.Validate()
}

// Validate reports settings that cannot work, naming the flag to fix.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required: it holds the certificate Secret and the lease"))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps=%v and --kube-api-burst=%d must be positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"--webhook-port", o.WebhookPort}, {"--metrics-port", o.MetricsPort}} {
		if p.port < 1 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("%s=%d: must be a port between 1 and 65535", p.flag, p.port))
		}
	}
	if names, err := compat.Resolve(compat.Flags{Compatibility: o.Compatibility, Driver: o.DriverName,
		Passthrough: o.Passthrough}); err != nil {
		errs = append(errs, err)
	} else {
		o.names, o.DriverName = names, names.Driver
	}
	if o.ComputeDomainNudgeAfter < 0 {
		errs = append(errs, fmt.Errorf("--compute-domain-daemon-nudge-after=%s: must be 0 (no nudges) or positive", o.ComputeDomainNudgeAfter))
	}
	if o.MaxDerivedClasses < 0 {
		errs = append(errs, fmt.Errorf("--max-derived-classes=%d: must be 0 (no limit) or positive", o.MaxDerivedClasses))
	}
	if o.WebhookPort == o.MetricsPort {
		errs = append(errs, fmt.Errorf("--webhook-port and --metrics-port are both %d: they must differ", o.WebhookPort))
	}
	if o.LeaderElect {
		if o.LeaseName == "" {
			errs = append(errs, errors.New("--leader-elect-lease-name must not be empty"))
		}
		if o.LeaseDuration <= o.LeaseRenewDeadline || o.LeaseRetryPeriod <= 0 ||
			float64(o.LeaseRenewDeadline) <= leaderelection.JitterFactor*float64(o.LeaseRetryPeriod) {
			errs = append(errs, fmt.Errorf("leader election needs --leader-elect-lease-duration (%s) > --leader-elect-renew-deadline (%s) > 1.2 × --leader-elect-retry-period (%s) > 0",
				o.LeaseDuration, o.LeaseRenewDeadline, o.LeaseRetryPeriod))
		}
	}
	errs = append(errs, o.validateCerts()...)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	o.validated = true
	return nil
}

func (o *Options) validateCerts() []error {
	var errs []error
	switch o.CertMode {
	case CertModeSelfManaged:
		if o.WebhookServiceName == "" {
			errs = append(errs, errors.New("--webhook-service-name is required with --cert-mode=self-managed: the certificate is issued for it"))
		}
		if o.CertRotateBefore <= 0 || o.CertValidity <= o.CertRotateBefore {
			errs = append(errs, fmt.Errorf("--cert-rotate-before (%s) must be positive and shorter than --cert-validity (%s)",
				o.CertRotateBefore, o.CertValidity))
		}
		if o.CertCheckInterval <= 0 {
			errs = append(errs, fmt.Errorf("--cert-check-interval=%s must be positive", o.CertCheckInterval))
		}
		for _, san := range o.CertExtraSANs {
			if net.ParseIP(san) == nil && len(validation.IsWildcardDNS1123Subdomain(san)) > 0 &&
				len(validation.IsDNS1123Subdomain(san)) > 0 {
				errs = append(errs, fmt.Errorf("--cert-extra-sans: %q is neither an IP address nor a DNS name (lower-case letters, digits, '-' and '.')", san))
			}
		}
		fallthrough
	case CertModeSecret:
		if o.CertSecretName == "" {
			errs = append(errs, fmt.Errorf("--cert-secret-name is required with --cert-mode=%s", o.CertMode))
		}
	case CertModeFiles:
		if o.CertFile == "" || o.KeyFile == "" {
			errs = append(errs, errors.New("--cert-mode=files needs --cert-file and --key-file"))
		}
		if o.CertFileInterval <= 0 {
			errs = append(errs, fmt.Errorf("--cert-file-check-interval=%s must be positive", o.CertFileInterval))
		}
	default:
		errs = append(errs, fmt.Errorf("--cert-mode=%q: must be one of %v", o.CertMode, certModes))
	}
	return errs
}

// leaseNamespace is the namespace of the leader election Lease.
func (o *Options) leaseNamespace() string {
	if o.LeaseNamespace != "" {
		return o.LeaseNamespace
	}
	return o.Namespace
}

// usesSecret reports whether the certificate comes from a Secret.
func (o *Options) usesSecret() bool {
	return slices.Contains([]string{CertModeSelfManaged, CertModeSecret}, o.CertMode)
}
