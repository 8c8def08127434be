// Package computedomain is the node side of ComputeDomains (issue 26) as a
// library: the channel driver's devices of one node (devices.go), the IMEX
// channel device nodes and their CDI edits (channels.go), and the prepare
// and unprepare of channel and daemon claims (prepare.go, daemon.go).
//
// It is not yet wired into a running kubelet plugin: nothing publishes
// these devices, serves their claims or keeps the daemons' node lists
// current. A DRAPlugin calls Devices at start, and Node.Prepare and
// Node.Unprepare from its PrepareResourceClaims and
// UnprepareResourceClaims.
package computedomain
