package e2elogs

import (
	"sync"
	"testing"
	"time"
)

var registered sync.Map // testing.TB -> struct{}

// OnFailure makes diagnose run, with the time of the first call, in a
// clean-up of t if t fails. Each run of a test registers once however often
// it is called; two runs of one test (go test -count) are two runs.
func OnFailure(t testing.TB, diagnose func(t testing.TB, start time.Time)) {
	if _, seen := registered.LoadOrStore(t, struct{}{}); seen {
		return
	}
	start := time.Now()
	t.Cleanup(func() {
		registered.Delete(t)
		if t.Failed() {
			diagnose(t, start)
		}
	})
}
