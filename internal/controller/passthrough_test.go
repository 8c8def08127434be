package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// --passthrough reaches the names the DeviceClass manager and the webhook
// are given; off, nothing changes.
func TestPassthroughFlag(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "gpudra-system")
	tests := []struct {
		args  []string
		class string
	}{
		{nil, ""},
		{[]string{"--passthrough"}, compat.NativeVFIOClass},
		{[]string{"--passthrough", "--compatibility=nvidia"}, compat.NVIDIAVFIOClass},
	}
	for _, tc := range tests {
		o := defaultOptions(t, tc.args...)
		require.NoError(t, o.Validate())
		require.Equal(t, tc.class != "", o.Names().Passthrough, "%v", tc.args)
		require.Equal(t, tc.class, o.Names().VFIOClass, "%v", tc.args)
	}
}
