package cmdmain

import (
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

func TestCommand(t *testing.T) {
	tests := []struct {
		name        string
		validateErr error
		runErr      error
		args        []string
		wantErr     string
		wantRun     bool
	}{
		{name: "runs", wantRun: true},
		{name: "validation stops it", validateErr: errors.New("--x is required"), wantErr: "--x is required"},
		{name: "run error", runErr: errors.New("boom"), wantErr: "boom", wantRun: true},
		{name: "logging flags exist", args: []string{"-v", "3"}, wantRun: true},
		{name: "bad logging flag value", args: []string{"--logging-format", "nope"}, wantErr: "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Logging can be applied once per process; undo it per case.
			t.Cleanup(func() { require.NoError(t, logsapi.ResetForTest(nil)) })
			ran := false
			cmd := Command(&cobra.Command{Use: "test-daemon"},
				func() error { return tc.validateErr },
				func(ctx context.Context) error {
					ran = true
					require.NotNil(t, klog.FromContext(ctx).GetSink())
					return tc.runErr
				})
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantRun, ran)
		})
	}
}
