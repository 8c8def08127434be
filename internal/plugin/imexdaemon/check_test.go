package imexdaemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/shared/imex"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name, body string
		wantErr    []string
		notReady   bool
	}{
		{"ready", `echo READY`, nil, false},
		{"not ready", `echo UNAVAILABLE`, []string{`answered "UNAVAILABLE"`}, true},
		{"ready among more", `printf 'READY\nextra\n'`, []string{"answered"}, true},
		{"ctl fails", `echo 'connection refused' >&2; exit 1`, []string{"-q failed: exit status 1", "connection refused"}, false},
		{"no answer in time", `sleep 10`, []string{"gave no answer within"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, bin := testOptions(t)
			o.CheckTimeout = 500 * time.Millisecond
			script(t, bin, imex.CtlBinary, "[ \"$1 $3\" = '-c -q' ] || { echo \"args $*\"; exit 9; }\n"+tc.body+"\n")
			_, ctx := ktesting.NewTestContext(t)
			err := Check(ctx, o)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.wantErr {
				require.ErrorContains(t, err, w)
			}
			if tc.notReady {
				require.ErrorIs(t, err, ErrNotReady)
			}
		})
	}
}
