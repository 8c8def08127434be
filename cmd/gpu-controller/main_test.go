package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommand(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		wantOut string
	}{
		{name: "help lists the flags", args: []string{"--help"},
			wantOut: "--cert-mode string"},
		{name: "logging flags", args: []string{"--help"}, wantOut: "--logging-format"},
		{name: "missing namespace", args: []string{}, wantErr: "--namespace (or $POD_NAMESPACE) is required"},
		{name: "namespace from the downward API", env: map[string]string{"POD_NAMESPACE": "ns"}, args: []string{"--cert-mode=x"},
			wantErr: `--cert-mode="x"`},
		{name: "a setting only a flag makes", env: map[string]string{"POD_NAMESPACE": "ns"}, args: []string{"--metrics-port=0"},
			wantErr: "--metrics-port=0: must be a port"},
		{name: "bad cert mode", args: []string{"--namespace=ns", "--cert-mode=x"}, wantErr: `--cert-mode="x"`},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "unknown flag: --nope"},
		{name: "no arguments", args: []string{"extra"}, wantErr: "unknown command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cmd := newCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Contains(t, out.String(), tc.wantOut)
		})
	}
}
