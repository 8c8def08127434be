// Package libtest tests the simulated libnvidia-ml (test/nvmlsim/lib) the
// way the plugin uses it: built with -buildmode=c-shared, installed in a
// fake driver root and opened through go-nvml's dlopen, then driven by
// internal/plugin/discovery, internal/plugin/mig, NVIDIA's nvcdi and raw go-nvml calls.
//
// A process binds each NVML symbol once, to the first libnvidia-ml it
// loaded: all tests of one process share one loaded library and point it
// at their own root with GPUDRA_SIM_NVML_ROOT (read at the first nvmlInit).
// Tests that need a fresh process re-run the test binary.
package libtest
