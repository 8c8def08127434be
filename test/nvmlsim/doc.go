// Package nvmlsim is the logic of the simulated libnvidia-ml.so (built from
// ./lib with -buildmode=c-shared; test-only, never shipped). The library
// answers NVML's C API from the simulator in test/sim, so that the
// plugin, NVIDIA's nvcdi and go-nvlib run their real code path — go-nvml
// dlopen()ing libnvidia-ml.so.1 under a driver root — on machines without
// GPUs.
//
// At the first nvmlInit the library finds its fake driver root (RootEnv,
// else the nearest directory above its own file holding ConfigPath), reads
// the Config there, builds a sim.Server for the configured profile and
// node, keeps its MIG state in the state file and watches the fault file.
// nvmlInit and nvmlShutdown are reference-counted; the last nvmlShutdown
// drops the simulated node.
//
// Library holds the state; its methods are the NVML functions with the
// arguments the C caller passes, so that ./lib only converts types. The
// README lists what is simulated and what answers NVML_ERROR_NOT_SUPPORTED.
package nvmlsim
