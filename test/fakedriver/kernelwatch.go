package fakedriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// KernelWatcher makes a fake driver root's PCI sysfs behave for writers in
// other processes (the plugin in its pod on the local cluster): it watches
// the drivers' bind and unbind and the devices' driver_override with inotify
// and, after each completed write (IN_CLOSE_WRITE), has the Kernel perform
// its effect (Kernel.Apply). Events are handled one at a time in the order
// the writes completed, so an unbind written just before a bind lands
// before it.
//
// The effect lands after the write returned: the writer sees every write
// succeed, and a refusal (EBUSY, ENODEV) is only logged. On the local
// cluster this proves the success path; refusals are covered by the tests
// that call Kernel's methods directly. Two writers writing the same
// attribute at once may lose one write (the file holds only the last); the
// plugin writes each GPU's moves one after the other and waits for each
// bind to show (vfio.verify).
type KernelWatcher struct {
	k    *Kernel
	f    *os.File
	dirs map[int32]string
	done chan struct{}
	err  error
}

// WatchKernel starts watching k's root; the watches are in place when it
// returns. The watcher runs until Stop or ctx's end; it logs through ctx's
// logger.
func WatchKernel(ctx context.Context, k *Kernel) (*KernelWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	// Non-blocking, so the file joins Go's poller and Close ends a Read.
	w := &KernelWatcher{k: k, f: os.NewFile(uintptr(fd), "inotify"), dirs: map[int32]string{}, done: make(chan struct{})}
	if err := w.addWatches(fd); err != nil {
		_ = w.f.Close()
		return nil, err
	}
	logger := klog.FromContext(ctx).WithValues("root", k.Root)
	logger.Info("simulated kernel watching PCI sysfs", "dirs", len(w.dirs))
	go func() {
		select {
		case <-ctx.Done():
			_ = w.f.Close()
		case <-w.done:
		}
	}()
	go func() {
		defer close(w.done)
		w.err = w.run(klog.NewContext(ctx, logger))
	}()
	return w, nil
}

// addWatches watches every driver's directory (bind, unbind) and every
// device directory with a driver_override.
func (w *KernelWatcher) addWatches(fd int) error {
	sys := filepath.Join(w.k.Root, "sys/bus/pci")
	drivers, _ := filepath.Glob(filepath.Join(sys, "drivers", "*", "bind"))
	devices, _ := filepath.Glob(filepath.Join(sys, "devices", "*", "driver_override"))
	if len(drivers) == 0 {
		return fmt.Errorf("%s has no PCI drivers with a bind file: not a fake driver root with passthrough files (test/fakedriver pciDrivers)", sys)
	}
	for _, f := range append(drivers, devices...) {
		dir := filepath.Dir(f)
		wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE)
		if err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		w.dirs[int32(wd)] = dir
	}
	return nil
}

// Stop ends the watcher and waits for it; it returns what ended it early.
func (w *KernelWatcher) Stop() error {
	_ = w.f.Close()
	<-w.done
	return w.err
}

const inotifyHeader = unix.SizeofInotifyEvent

func (w *KernelWatcher) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	buf := make([]byte, 64*(inotifyHeader+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			logger.Info("simulated kernel stopped")
			return nil
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		for off := 0; off+inotifyHeader <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+inotifyHeader:off+inotifyHeader+size]), "\x00")
			off += inotifyHeader + size
			if mask&unix.IN_Q_OVERFLOW != 0 {
				logger.Error(nil, "inotify queue overflowed: writes were lost")
				continue
			}
			dir, ok := w.dirs[wd]
			if !ok || mask&unix.IN_CLOSE_WRITE == 0 {
				continue
			}
			w.apply(logger, filepath.Join(dir, name))
		}
	}
}

// apply performs one write's effect and logs it; a refused or ignored write
// is logged as an error, as the writer cannot be told.
func (w *KernelWatcher) apply(logger klog.Logger, path string) {
	rel, _ := filepath.Rel(w.k.Root, path)
	value, err := w.k.Apply(path)
	switch {
	case err != nil:
		logger.Error(err, "write ignored: the kernel would have refused it", "file", rel, "value", value)
	case value != "" || filepath.Base(path) == "driver_override":
		logger.V(2).Info("write applied", "file", rel, "value", value)
	}
}
