// Package failpoint lets fault-injection tests stop the plugin at named
// points of the prepare path. Failpoints exist only in binaries built with
// the "failpoints" build tag; in normal builds Inject is an empty function.
//
// With the tag, GPUDRA_FAILPOINTS lists what to do where, e.g.
//
//	GPUDRA_FAILPOINTS="prepare/PrepareStarted=crash,unprepare/CDIRemoved=sleep(200)"
//
// Actions: crash (SIGKILL the process, as kill -9 would), sleep(<ms>),
// and crash-after(<n>) (crash on the n-th hit, to kill the plugin in the
// middle of a batch).
package failpoint

// Names of the failpoints in the prepare path.
const (
	PrepareStarted      = "prepare/PrepareStarted"
	PrepareCDIWritten   = "prepare/CDIWritten"
	PrepareCompleted    = "prepare/PrepareCompleted"
	PrepareMIGCreated   = "prepare/MIGCreated"
	UnprepareCDIRemoved = "unprepare/CDIRemoved"
)

// EnvVar configures the failpoints of a test build.
const EnvVar = "GPUDRA_FAILPOINTS"
