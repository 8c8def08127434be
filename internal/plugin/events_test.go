package plugin

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"

	"github.com/gpudra/gpudra/internal/plugin/prepare"
)

func TestRecoverFailedEvents(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sink := &eventSink{recorder: rec}
	sink.recoverFailed([]prepare.RecoverFailure{
		{ClaimUID: "uid-b", Claim: "default/b", Err: errors.New("recover claim default/b: its GPU is gone")},
		{Device: "gpu-1", Err: errors.New("a GPU's failure has no claim to tell")},
		{ClaimUID: "uid-x", Err: errors.New("a spec without a record has no claim to tell")},
	})
	require.Len(t, rec.Events, 1)
	require.Equal(t, "Warning RecoverFailed recover claim default/b: its GPU is gone", <-rec.Events)
	(*eventSink)(nil).recoverFailed([]prepare.RecoverFailure{{Claim: "default/b", Err: errors.New("no sink")}})
}
