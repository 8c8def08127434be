//go:build e2e

package e2e

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// benchCDIRoot is a new directory for one benchmark plugin's CDI specs, on
// a tmpfs as on a node: the plugin's default --cdi-root /var/run/cdi (also
// NVIDIA's) lies in /run, a tmpfs on systemd hosts, while this machine's
// temporary directory is on its root file system. Both drivers of a
// side-by-side run get one. GPUDRA_BENCH_CDI_DIR=<dir> places it under dir
// instead; without a tmpfs at /dev/shm it stays under dir.
func benchCDIRoot(b *testing.B, dir string) string {
	base := os.Getenv("GPUDRA_BENCH_CDI_DIR")
	if base == "" {
		var fs unix.Statfs_t
		if err := unix.Statfs("/dev/shm", &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
			b.Logf("no tmpfs at /dev/shm: CDI specs under %s", dir)
			return dir + "/cdi"
		}
		base = "/dev/shm"
	}
	cdi, err := os.MkdirTemp(base, "bench-cdi-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(cdi) })
	return cdi
}
