package imexdaemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

// script installs an executable shell script as name in a directory that
// becomes $PATH (the tools are looked up there when no driver root is set).
func script(t *testing.T, dir, name, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755))
}

// testOptions are Options with no driver root, the tools from a temporary
// $PATH, files in a temporary tmp and fast timings.
func testOptions(t *testing.T) (Options, string) {
	bin := t.TempDir()
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	o := Options{DomainUID: "0f7c5e1e-uid", NodesConfig: filepath.Join(t.TempDir(), "nodes"), TmpDir: t.TempDir(),
		Poll: 20 * time.Millisecond, Backoff: time.Millisecond, StopTimeout: 5 * time.Second, CheckTimeout: 2 * time.Second}
	return o, bin
}

// runAsync runs Run until the returned stop is called; stop returns Run's
// error.
func runAsync(t *testing.T, o Options) (stop func() error, done <-chan error) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { ch <- Run(ctx, o) }()
	t.Cleanup(cancel)
	return func() error {
		cancel()
		select {
		case err := <-ch:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return after its context ended")
			return nil
		}
	}, ch
}

func lines(t *testing.T, path string) []string {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Fields(string(data))
}
