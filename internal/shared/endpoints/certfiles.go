package endpoints

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"

	"k8s.io/klog/v2"
)

// certFiles serves the certificate and key pair of two PEM files and reads
// them again at the first handshake after either changed: a Secret volume
// (cert-manager, the chart's own) replaces both through a symlink swap, and
// a scraper connects every 15-60 s. A pair that does not load (e.g. one file
// written and not yet the other) is logged and the last good one served.
type certFiles struct {
	ctx               context.Context // for logging
	certFile, keyFile string

	mu     sync.Mutex
	cert   *tls.Certificate
	stamps [2]fileStamp
}

// fileStamp tells a file's versions apart: a rename or symlink swap brings
// another inode, a rewrite in place another size or modification time.
type fileStamp struct {
	inode uint64
	size  int64
	mod   int64 // nanoseconds
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{size: fi.Size(), mod: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.inode = st.Ino
	}
	return s, nil
}

func (f *certFiles) current() ([2]fileStamp, error) {
	c, err := stamp(f.certFile)
	if err != nil {
		return [2]fileStamp{}, err
	}
	k, err := stamp(f.keyFile)
	if err != nil {
		return [2]fileStamp{}, err
	}
	return [2]fileStamp{c, k}, nil
}

// load reads the pair; the caller holds mu or is the only user.
func (f *certFiles) load() error {
	stamps, err := f.current()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return err
	}
	f.cert, f.stamps = &cert, stamps
	return nil
}

// get is tls.Config.GetCertificate.
func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stamps, err := f.current()
	if err == nil && stamps == f.stamps {
		return f.cert, nil
	}
	if err == nil {
		err = f.load()
	}
	if err != nil {
		klog.FromContext(f.ctx).Error(fmt.Errorf("%w (they must be PEM files that form a key pair)", err),
			"Cannot load the changed metrics serving certificate; serving the previous one",
			"certFile", f.certFile, "keyFile", f.keyFile)
		return f.cert, nil
	}
	klog.FromContext(f.ctx).Info("Serving the changed metrics serving certificate", "certFile", f.certFile)
	return f.cert, nil
}
