// Package failpoint lets fault-injection tests stop the plugin at named
// points of the prepare path. Failpoints exist only in binaries built with
// the "failpoints" build tag; in normal builds Inject is an empty function.
//
// With the tag, GPUDRA_FAILPOINTS lists what to do where, e.g.
//
//	GPUDRA_FAILPOINTS="prepare/PrepareStarted=crash,unprepare/CDIRemoved=sleep(200)"
//
// Actions: crash (SIGKILL the process, as kill -9 would), sleep(<ms>),
// crash-after(<n>) (crash on the n-th hit, to kill the plugin in the
// middle of a batch) and sleep-crash(<ms>) (sleep, then crash, on the first
// hit).
//
// GPUDRA_FAILPOINTS_FILE names a file with a specification of the same form
// that a test writes and removes while the process runs (the plugin's pod
// sees it on a hostPath): it is read on every Inject, a changed content arms
// its failpoints afresh (hit counts from zero), and its entries win over
// GPUDRA_FAILPOINTS. A crash armed there removes the file just before it
// kills the process, so that the container the kubelet starts again runs
// unarmed: each arming kills the plugin once.
package failpoint

// Names of the failpoints in the prepare path.
const (
	PrepareStarted    = "prepare/PrepareStarted"
	PrepareCDIWritten = "prepare/CDIWritten"
	PrepareCompleted  = "prepare/PrepareCompleted"
	PrepareMIGCreated = "prepare/MIGCreated"
	// PrepareFabricPartitionActivated: the claim's Fabric Manager partition
	// is active (or was already), nothing else of the prepare is done.
	PrepareFabricPartitionActivated = "prepare/FabricPartitionActivated"
	UnprepareCDIRemoved             = "unprepare/CDIRemoved"
	// PrepareTimeSliceSet: a GPU's time slice was set (once per GPU of a
	// time-sliced claim), before the next GPU's.
	PrepareTimeSliceSet = "prepare/TimeSliceSet"
	// RollbackSharingReleased: the rollback of a failed prepare has removed
	// the CDI spec and undone the sharing setup (time slices, MPS daemon);
	// MIG devices, holders and the record are still there.
	RollbackSharingReleased = "rollback/SharingReleased"
)

// EnvVar configures the failpoints of a test build.
const EnvVar = "GPUDRA_FAILPOINTS"

// FileEnvVar names a file that arms failpoints while the process runs.
const FileEnvVar = "GPUDRA_FAILPOINTS_FILE"
