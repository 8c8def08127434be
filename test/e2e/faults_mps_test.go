//go:build e2e && faults

package e2e

import (
	"testing"

	"github.com/gpudra/gpudra/internal/plugin/failpoint"
)

// testMPSDaemonGoneAfterCrashInUnprepare (TestFaults, with the failpoints
// image): the plugin crashes in the middle of the claim's unprepare; the
// restarted plugin finishes it and the daemon Pod, its process and its
// directory are gone.
func testMPSDaemonGoneAfterCrashInUnprepare(t *testing.T) {
	ns := namespace(t)
	uid, dir := mpsClaimOn(t, ns, faultNode)
	before := daemonNow(t, faultNode, uid, dir)
	arm(t, failpoint.UnprepareCDIRemoved+"=crash")
	deletePod(t, ns, "mps-client")
	waitDaemonGone(t, faultNode, uid, dir, before.pid)
}
