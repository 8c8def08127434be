// Package certs provides the TLS serving certificate of the gpu-controller's
// admission webhook. A Holder keeps the current certificate and serves it
// through tls.Config.GetCertificate, so a renewed certificate is used from
// the next TLS handshake on without a restart. Three sources fill it:
//
//   - self-managed (default): SelfManaged, run on the leader, keeps a CA and
//     a serving certificate for <service>.<namespace>.svc (and
//     .svc.cluster.local, plus extra names; an extra name that parses as an
//     IP address, e.g. 127.0.0.1 for a webhook configured by URL, becomes an
//     IP SAN) in a kubernetes.io/tls Secret
//     (tls.crt, tls.key, ca.crt), reuses it while it is valid, renews it
//     before it expires and writes the CA into the caBundle of every webhook
//     of the ValidatingWebhookConfiguration. Every replica serves the
//     Secret's certificate through a SecretSource. The Secret is owned by the
//     controller in this mode: whatever else it holds is replaced.
//   - secret: a SecretSource on a Secret that something else maintains, for
//     example a cert-manager Certificate, whose CA injector then also sets
//     the caBundle.
//   - files: a FileSource on certificate and key files, re-read when they
//     change.
package certs
