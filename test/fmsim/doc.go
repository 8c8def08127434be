// Package fmsim is the logic of the simulated libnvfm, NVSwitch Fabric
// Manager's client library, as test/nvmlsim is that of the simulated
// libnvidia-ml: plain, unit-tested Go; test/fmsim/lib is only the //export
// layer of the c-shared library that a fake driver root holds as libnvfm.so,
// so that code using NVIDIA's go-nvfm runs its real path (dlopen, the C
// calls, the C structs) without an NVSwitch system. Test-only, never shipped.
//
// The fabric is the fake driver root's: the library finds the root as the
// simulated libnvidia-ml does (nvmlsim.FindRoot, the same GPUDRA_SIM_NVML_ROOT
// and etc/gpudra-sim/config.json), offers the partitions of the root's
// profile (sim.Profile.FabricPartitions, with the GPUs' UUIDs and bus IDs of
// the root's node) and keeps which are active in StatePath, under a lock, so
// that every process using the root sees one fabric. The simulated
// nvidia-fabricmanager "runs" while its unix socket (SocketPath in the root,
// where NVIDIA's DRA driver looks by default) exists. See README.md for what
// each call answers and how that differs from the real library.
package fmsim
