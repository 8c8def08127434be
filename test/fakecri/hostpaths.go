package fakecri

import (
	"errors"
	"fmt"
	"os"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/pkg/cdi"
)

// checkHostPaths refuses CDI devices whose specs name host paths that do not
// exist, the way a real node fails: the CDI library stats a device node's
// host path, runc bind-mounts a mount's source and executes a hook's path.
// A spec written with the plugin's view of a mounted driver root
// (/driver-root/...) instead of the host's fails here as it would there.
// The caller holds cdiMu and has refreshed the cache.
func (r *Runtime) checkHostPaths(names []string) error {
	var errs []error
	for _, name := range names {
		dev := r.cdiCache.GetDevice(name)
		if dev == nil {
			continue // InjectDevices reports unresolvable devices
		}
		for _, e := range []*cdispec.ContainerEdits{&dev.ContainerEdits, &dev.GetSpec().ContainerEdits} {
			for _, p := range hostPaths(e) {
				if _, err := os.Stat(p.Path); err != nil {
					errs = append(errs, fmt.Errorf("CDI device %s (spec %s): %s %s: %w", name, dev.GetSpec().GetPath(), p.Kind, p.Path, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// hostPaths lists the host paths that a container runtime opens for edits.
// A device node given by its numbers at its own path needs no host file (the
// runtime creates it); one named at another host path, or without numbers,
// is read from the host.
func hostPaths(e *cdispec.ContainerEdits) []cdi.HostPath {
	var out []cdi.HostPath
	for _, p := range cdi.HostPaths(e) {
		if p.Node != nil && p.Path == p.Node.Path && p.Node.Major != 0 {
			continue
		}
		out = append(out, p)
	}
	return out
}
