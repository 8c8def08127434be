package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Defaults of the self-managed mode.
const (
	DefaultValidity      = 365 * 24 * time.Hour
	DefaultRotateBefore  = 30 * 24 * time.Hour
	DefaultCheckInterval = time.Hour
	// retryDelay is the first delay after a failed reconcile; it doubles up
	// to the check interval.
	retryDelay = 5 * time.Second
)

// ManagedByLabel marks the Secrets the controller writes.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// ManagedByValue is the value of ManagedByLabel on objects the gpu-controller
// owns.
const ManagedByValue = "gpudra-controller"

// SelfManaged keeps a CA and a serving certificate in a Secret, renews both
// before they expire and makes the webhooks of a ValidatingWebhookConfiguration
// trust the CA. Run it on one replica (the leader); every replica serves the
// Secret's certificate through a SecretSource.
type SelfManaged struct {
	Client     kubernetes.Interface
	Namespace  string
	SecretName string
	// DNSNames the certificate must cover; see ServiceDNSNames. Entries that
	// parse as IP addresses are IP SANs.
	DNSNames []string
	// WebhookConfigName names the ValidatingWebhookConfiguration whose
	// webhooks get the CA as caBundle; empty leaves it alone.
	WebhookConfigName string
	// Validity of new certificates, DefaultValidity when zero.
	Validity time.Duration
	// RotateBefore: a certificate that expires within this is replaced,
	// DefaultRotateBefore when zero.
	RotateBefore time.Duration
	// CheckInterval between checks, DefaultCheckInterval when zero.
	CheckInterval time.Duration
	// Holder, if set, is loaded with the current certificate.
	Holder *Holder
	// Now is the clock, time.Now when nil.
	Now func() time.Time
}

func (m *SelfManaged) setDefaults() error {
	if m.Validity == 0 {
		m.Validity = DefaultValidity
	}
	if m.RotateBefore == 0 {
		m.RotateBefore = DefaultRotateBefore
	}
	if m.CheckInterval == 0 {
		m.CheckInterval = DefaultCheckInterval
	}
	if m.Now == nil {
		m.Now = time.Now
	}
	if m.RotateBefore >= m.Validity {
		return fmt.Errorf("certificate rotation threshold %s must be shorter than the validity %s, or every check would rotate",
			m.RotateBefore, m.Validity)
	}
	if len(m.DNSNames) == 0 {
		return errors.New("self-managed certificates need at least one DNS name or IP address (the webhook Service)")
	}
	return nil
}

// Reconcile makes sure the Secret holds a valid certificate that does not
// expire within RotateBefore (creating or renewing it), that the webhook
// configuration trusts its CA, and that the Holder serves it. During a
// renewal the new CA is trusted before the new certificate is written, and
// the previous CA stays in the bundle, so that no replica serves a
// certificate the API server does not trust yet.
func (m *SelfManaged) Reconcile(ctx context.Context) error {
	if err := m.setDefaults(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(m.Namespace, m.SecretName))
	now := m.Now()
	secret, err := m.Client.CoreV1().Secrets(m.Namespace).Get(ctx, m.SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return fmt.Errorf("get Secret %s/%s with the webhook certificate (check the controller's RBAC): %w",
			m.Namespace, m.SecretName, err)
	}

	var prevCA []byte
	if secret != nil {
		current := BundleFromSecret(secret)
		reason := Check(current, m.DNSNames, now, m.RotateBefore)
		if reason == nil {
			if err := m.patchCABundle(ctx, current.CAPEM); err != nil {
				return err
			}
			return m.load(current)
		}
		logger.Info("Renewing the webhook serving certificate", "reason", reason.Error())
		prevCA = firstValidCA(current.CAPEM, now)
	} else {
		logger.Info("Creating the webhook serving certificate")
	}

	next, err := Generate(m.DNSNames, now, m.Validity, prevCA)
	if err != nil {
		return err
	}
	if err := m.patchCABundle(ctx, next.CAPEM); err != nil {
		return err
	}
	if err := m.writeSecret(ctx, secret, next); err != nil {
		return err
	}
	logger.Info("Stored a new webhook serving certificate", "dnsNames", m.DNSNames,
		"notAfter", now.Add(m.Validity).UTC().Format(time.RFC3339))
	return m.load(next)
}

func (m *SelfManaged) load(b *Bundle) error {
	if m.Holder == nil {
		return nil
	}
	_, err := m.Holder.Load(b.CertPEM, b.KeyPEM)
	return err
}

// writeSecret creates the Secret, or updates the one read before (a
// concurrent change makes the update fail with a conflict, and the next
// reconcile starts over).
func (m *SelfManaged) writeSecret(ctx context.Context, existing *corev1.Secret, b *Bundle) error {
	data := map[string][]byte{CertKey: b.CertPEM, KeyKey: b.KeyPEM, CAKey: b.CAPEM}
	secrets := m.Client.CoreV1().Secrets(m.Namespace)
	if existing == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: m.SecretName, Namespace: m.Namespace,
				Labels: map[string]string{ManagedByLabel: ManagedByValue}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s/%s for the webhook certificate: %w", m.Namespace, m.SecretName, err)
		}
		return nil
	}
	s := existing.DeepCopy()
	s.Data = data
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[ManagedByLabel] = ManagedByValue
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Secret %s/%s with the renewed webhook certificate: %w", m.Namespace, m.SecretName, err)
	}
	return nil
}

// patchCABundle sets caBundle on every webhook of the configuration. A
// missing configuration is logged, not an error: nothing calls the webhook
// then, and Run reconciles again when it appears.
func (m *SelfManaged) patchCABundle(ctx context.Context, caPEM []byte) error {
	if m.WebhookConfigName == "" {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("validatingWebhookConfiguration", m.WebhookConfigName)
	configs := m.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := configs.Get(ctx, m.WebhookConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caPEM) {
				cfg.Webhooks[i].ClientConfig.CABundle = caPEM
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if _, err := configs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			return err
		}
		logger.Info("Updated the caBundle of the webhooks", "webhooks", len(cfg.Webhooks))
		return nil
	})
	if apierrors.IsNotFound(err) {
		logger.Info("ValidatingWebhookConfiguration not found, caBundle not set; install it (the Helm chart does) or fix --webhook-configuration-name")
		return nil
	}
	if err != nil {
		return fmt.Errorf("set caBundle in ValidatingWebhookConfiguration %s: %w", m.WebhookConfigName, err)
	}
	return nil
}

// Run reconciles at start, every CheckInterval, and whenever the webhook
// configuration changes (an upgrade that resets caBundle is repaired at
// once), until ctx is done. Failures are retried with a growing delay.
func (m *SelfManaged) Run(ctx context.Context) error {
	if err := m.setDefaults(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	trigger := make(chan struct{}, 1)
	if m.WebhookConfigName != "" {
		factory, err := m.watchWebhookConfig(ctx, trigger)
		if err != nil {
			return err
		}
		defer factory.Shutdown()
	}
	delay := retryDelay
	for {
		next := m.CheckInterval
		if err := m.Reconcile(ctx); err != nil {
			logger.Error(err, "Webhook certificate reconcile failed; retrying", "retryIn", delay)
			next = min(delay, m.CheckInterval)
			delay *= 2
		} else {
			delay = retryDelay
		}
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-trigger:
			timer.Stop()
		}
	}
}

func (m *SelfManaged) watchWebhookConfig(ctx context.Context, trigger chan<- struct{}) (informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(m.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", m.WebhookConfigName).String()
		}))
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	informer := factory.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
	}); err != nil {
		return nil, fmt.Errorf("watch ValidatingWebhookConfiguration %s: %w", m.WebhookConfigName, err)
	}
	factory.Start(ctx.Done())
	return factory, nil
}

// BundleFromSecret reads tls.crt, tls.key and ca.crt of a Secret.
func BundleFromSecret(s *corev1.Secret) *Bundle {
	return &Bundle{CertPEM: s.Data[CertKey], KeyPEM: s.Data[KeyKey], CAPEM: s.Data[CAKey]}
}
