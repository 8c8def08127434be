//go:build tools

// Package tools pins the command build-apiserver.sh builds.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
