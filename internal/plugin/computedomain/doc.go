// Package computedomain is the node side of ComputeDomains (issue 26) as a
// library: the channel driver's devices of one node (devices.go), the IMEX
// channel device nodes and their CDI edits (channels.go), the claims'
// configuration (config.go), the prepare and unprepare of channel and
// daemon claims (node.go, daemon.go) with the claims held in a Store
// (store.go; the plugin's records on disk), ComputeDomains looked up by
// UID from informers (domains.go), and the kubelet plugin's prepare and
// unprepare calls with one CDI spec per claim (claims.go).
//
// internal/plugin/cdplugin runs it as a kubelet plugin (gpu-kubelet-plugin
// compute-domain; in the chart behind computeDomains.enabled, off by
// default).
package computedomain
