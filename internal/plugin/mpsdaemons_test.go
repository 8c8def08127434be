package plugin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateMPSDaemon(t *testing.T) {
	for name, tc := range map[string]struct {
		o       MPSDaemonOptions
		wantErr string
	}{
		"default: processes": {o: MPSDaemonOptions{}},
		"pods":               {o: MPSDaemonOptions{Mode: "pod", Image: "gpudra:1", Namespace: "ns", Resources: `{"limits":{"memory":"64Mi"}}`}},
		"pods need an image": {o: MPSDaemonOptions{Mode: "pod", Namespace: "ns"}, wantErr: "--mps-daemon-image"},
		"bad resources":      {o: MPSDaemonOptions{Mode: "pod", Image: "i", Namespace: "ns", Resources: "{"}, wantErr: "--mps-daemon-resources"},
		"unknown mode":       {o: MPSDaemonOptions{Mode: "deployment"}, wantErr: `must be "process" or "pod"`},
	} {
		t.Run(name, func(t *testing.T) {
			err := (&Options{MPSDaemon: tc.o}).validateMPSDaemon()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
