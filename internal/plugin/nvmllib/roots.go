package nvmllib

import (
	"os"
	"path/filepath"
)

// Roots says where the driver's files are, as this process sees them
// and as the host (the container runtime that reads our CDI specs) sees them,
// and where the kernel's device nodes, /proc and /sys entries of the driver
// are read.
//
// The plugin runs in a container (the chart mounts the host's driver root at
// /driver-root) or on the host. A containerized driver (GPU Operator) or a
// simulated driver root (make fake-driver-root) brings its own dev/, proc/
// and sys/ entries; a driver installed on the host has them at / . One rule
// covers all: a driver root that has dev/nvidiactl (proc/driver/nvidia,
// sys/bus/pci/devices) is where device nodes (/proc, /sys entries) are read,
// otherwise the process's own /dev, /proc and /sys are.
type Roots struct {
	// Driver and HostDriver: the driver root seen here and by the host.
	Driver, HostDriver string
	// Dev and HostDev: the root under which dev/nvidia* lives, seen here and by the host.
	Dev, HostDev string
	// Proc is the proc file system to read driver tables from (/proc).
	Proc string
	// Sys is the sysfs to resolve PCI topology in (/sys).
	Sys string
}

// DriverRoots applies the rule to a driver root as this process sees it and
// as the host sees it (empty: the same).
func DriverRoots(driverRoot, hostDriverRoot string) Roots {
	r := Roots{Driver: clean(driverRoot), HostDriver: clean(hostDriverRoot),
		Dev: "/", HostDev: "/", Proc: "/proc", Sys: "/sys"}
	if hostDriverRoot == "" {
		r.HostDriver = r.Driver
	}
	if r.Driver == "/" {
		return r
	}
	if Exists(filepath.Join(r.Driver, "dev", "nvidiactl")) {
		r.Dev, r.HostDev = r.Driver, r.HostDriver
	}
	if Exists(filepath.Join(r.Driver, "proc", "driver", "nvidia")) {
		r.Proc = filepath.Join(r.Driver, "proc")
	}
	if Exists(filepath.Join(r.Driver, "sys", "bus", "pci", "devices")) {
		r.Sys = filepath.Join(r.Driver, "sys")
	}
	return r
}

func clean(p string) string {
	if p == "" {
		return "/"
	}
	return filepath.Clean(p)
}

// Exists tells whether a file exists (stat follows links).
func Exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
