package certs

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// SecretSource serves the certificate of a Secret (tls.crt, tls.key) and
// reloads it whenever the Secret changes. It never writes the Secret: in the
// self-managed mode the leader's SelfManaged does, otherwise something else
// (cert-manager, an operator) does, and that something also keeps the
// webhook configuration's caBundle.
type SecretSource struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Holder    *Holder

	synced atomic.Bool
}

// HasSynced reports whether the Secret watch has done its initial list.
func (s *SecretSource) HasSynced() bool { return s.synced.Load() }

// Run watches the Secret until ctx is done. A Secret that is missing or
// holds no valid key pair is logged and leaves the current certificate in
// place.
func (s *SecretSource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(s.Namespace, s.Name))
	factory := informers.NewSharedInformerFactoryWithOptions(s.Client, 0,
		informers.WithNamespace(s.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name).String()
		}))
	defer factory.Shutdown()
	informer := factory.Core().V1().Secrets().Informer()
	load := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		changed, err := s.Holder.Load(secret.Data[CertKey], secret.Data[KeyKey])
		if err != nil {
			logger.Error(err, "The Secret holds no usable serving certificate; it needs tls.crt and tls.key in PEM that form a key pair")
			return
		}
		if changed {
			logger.Info("Loaded the webhook serving certificate from the Secret", "notAfter", s.Holder.NotAfter())
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, obj any) { load(obj) },
		DeleteFunc: func(any) {
			logger.Info("The Secret with the serving certificate was deleted; still serving the last certificate loaded")
		},
	}); err != nil {
		return fmt.Errorf("watch Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		s.synced.Store(true)
		if !s.Holder.Ready() {
			logger.Info("Waiting for the Secret with the webhook serving certificate")
		}
	}
	<-ctx.Done()
	return nil
}

// DefaultFileCheckInterval is how often FileSource looks for changed files.
const DefaultFileCheckInterval = 10 * time.Second

// FileSource serves a certificate and key from files (for example a mounted
// Secret or a cert-manager CSI volume) and reloads them when their content
// changes.
type FileSource struct {
	CertFile string
	KeyFile  string
	// Interval between checks, DefaultFileCheckInterval when zero.
	Interval time.Duration
	Holder   *Holder
}

// Load reads the files once and serves them if they changed.
func (f *FileSource) Load(ctx context.Context) error {
	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		return fmt.Errorf("read the serving certificate (--cert-file): %w", err)
	}
	keyPEM, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return fmt.Errorf("read the serving key (--key-file): %w", err)
	}
	changed, err := f.Holder.Load(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s and %s: %w", f.CertFile, f.KeyFile, err)
	}
	if changed {
		klog.FromContext(ctx).Info("Loaded the webhook serving certificate", "certFile", f.CertFile,
			"keyFile", f.KeyFile, "notAfter", f.Holder.NotAfter())
	}
	return nil
}

// Run loads the files now and then every Interval until ctx is done. Errors
// are logged (a half-written pair is picked up on the next check) and leave
// the current certificate in place.
func (f *FileSource) Run(ctx context.Context) error {
	interval := f.Interval
	if interval == 0 {
		interval = DefaultFileCheckInterval
	}
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := f.Load(ctx); err != nil {
			logger.Error(err, "Cannot load the webhook serving certificate from files; will retry", "retryIn", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
