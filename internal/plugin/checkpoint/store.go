package checkpoint

import (
	"errors"
	"fmt"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/internal/shared/rawfile"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultBootIDPath is where Linux exposes the ID of the current boot.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

const (
	fileSuffix = ".json"
	dirMode    = 0o700
	fileMode   = 0o600
	// recordReadSize is the buffer a record read starts with: a 1-GPU
	// record is about 600 bytes, one of eight GPUs about 2 KiB.
	recordReadSize = 4 << 10
)

// Options configure a Store.
type Options struct {
	// Dir holds the record files. It is created with mode 0700 if missing,
	// and tightened to 0700 if it exists with wider permissions.
	Dir string
	// SyncDir makes Put and Delete fsync the directory after renaming or
	// removing a file, so that the change itself survives a power loss.
	// Note that the zero value is false; DefaultOptions sets it to true,
	// which is what production code should use.
	SyncDir bool
	// BootID returns the ID of the current boot. Nil reads DefaultBootIDPath.
	BootID func() (string, error)
}

// DefaultOptions returns the options for production use: records in dir,
// with directory fsync enabled and the boot ID read from the kernel.
func DefaultOptions(dir string) Options {
	return Options{Dir: dir, SyncDir: true}
}

// Store reads and writes claim records, one file per claim. It is safe for
// concurrent use by many goroutines. Operations on different claims are
// independent; operations on the same claim must be serialized by the caller
// (the last completed Put or Delete wins).
type Store struct {
	root    string // Options.Dir
	dir     string // root/<bootID>: this boot's records
	syncDir bool
	bootID  string
}

// Open prepares dir for use, reads the current boot ID once and removes temp
// files left by writes that were interrupted by a crash. It deletes no record.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("open checkpoint store: no directory given; set Options.Dir")
	}
	readBootID := opts.BootID
	if readBootID == nil {
		readBootID = readKernelBootID
	}
	bootID, err := checkBootID(readBootID())
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}

	root := filepath.Clean(opts.Dir)
	// Records live in one directory per boot. A power loss always means a
	// reboot, so whatever a power loss may have half-written sits in the
	// directory of an earlier boot, which is stale as a whole.
	dir := filepath.Join(root, bootID)
	if err := os.MkdirAll(root, dirMode); err != nil {
		return nil, fmt.Errorf("open checkpoint store: create directory %s: %w; check the path and the plugin's permissions", root, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open checkpoint store: %s is not a directory; point Options.Dir at a directory", root)
	}
	if fi.Mode().Perm() != dirMode {
		if err := os.Chmod(root, dirMode); err != nil {
			return nil, fmt.Errorf("open checkpoint store: restrict %s to mode 0700: %w", root, err)
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("open checkpoint store: create directory %s: %w", dir, err)
	}

	s := &Store{root: root, dir: dir, syncDir: opts.SyncDir, bootID: bootID}
	if err := s.removeTempFiles(); err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}
	return s, nil
}

// CurrentBootID returns the ID of the running boot as Open reads it: the
// content of DefaultBootIDPath, trimmed. Other state that only holds until
// the next reboot (the health monitor's) is keyed by it too.
func CurrentBootID() (string, error) { return checkBootID(readKernelBootID()) }

// checkBootID trims a boot ID that was read and checks that it can name a
// directory.
func checkBootID(bootID string, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	bootID = strings.TrimSpace(bootID)
	if bootID == "" {
		return "", errors.New("the boot ID is empty; check that " + DefaultBootIDPath + " is readable")
	}
	if strings.ContainsAny(bootID, `/\`) || bootID == "." || bootID == ".." {
		return "", fmt.Errorf("boot ID %q cannot name a directory", bootID)
	}
	return bootID, nil
}

func readKernelBootID() (string, error) {
	b, err := os.ReadFile(DefaultBootIDPath)
	if err != nil {
		return "", fmt.Errorf("%w (the plugin must run on Linux with /proc mounted)", err)
	}
	return string(b), nil
}

// removeTempFiles deletes temp files of interrupted writes. They were never
// renamed into place, so no record depends on them.
func (s *Store) removeTempFiles() error {
	n, err := atomicfile.RemoveTempsIn(s.dir, func(target string) bool { return strings.HasSuffix(target, fileSuffix) })
	if err != nil {
		return err
	}
	if n > 0 && s.syncDir {
		return atomicfile.SyncDir(s.dir)
	}
	return nil
}

// BootID returns the boot ID read by Open; Put stamps it on every record.
func (s *Store) BootID() string { return s.bootID }

// Dir returns the directory holding this boot's records.
func (s *Store) Dir() string { return s.dir }

// Path returns the file of the record for uid, or "" if uid is not a valid
// claim UID (see model.ValidateUID).
func (s *Store) Path(uid string) string {
	if model.ValidateUID(uid) != nil {
		return ""
	}
	return filepath.Join(s.dir, uid+fileSuffix)
}

// Put atomically writes rec, replacing any earlier record of the same claim.
// It sets rec.BootID and rec.Updated. When Put returns nil the record is on
// stable storage (its directory entry too, if SyncDir is set); when it fails,
// the earlier record, if any, is intact.
func (s *Store) Put(rec *ClaimRecord) error { return s.put(rec, true) }

// PutVolatile writes rec atomically like Put but without fsync: the record
// survives a crash of the process (the kernel keeps it), not a power loss.
// That is enough for records that only matter until the next reboot — which
// a power loss is — such as PrepareStarted: after a reboot every record of
// the earlier boot is stale anyway.
func (s *Store) PutVolatile(rec *ClaimRecord) error { return s.put(rec, false) }

func (s *Store) put(rec *ClaimRecord, durable bool) error {
	if rec == nil {
		return errors.New("put checkpoint record: the record is nil")
	}
	if err := model.ValidateUID(rec.UID); err != nil {
		return fmt.Errorf("put checkpoint record: %w", err)
	}
	if !rec.State.Valid() {
		return fmt.Errorf("put checkpoint record for claim %s: unknown state %q; use PrepareStarted, PrepareCompleted or UnprepareStarted",
			rec.UID, rec.State)
	}
	rec.BootID = s.bootID
	rec.Updated = time.Now().UTC().Round(0)
	b, err := encode(rec)
	if err != nil {
		return fmt.Errorf("put checkpoint record: %w", err)
	}
	if len(b) > maxRecordSize {
		return fmt.Errorf("put checkpoint record for claim %s: the record is %d bytes, more than the %d-byte limit; shrink the device configs",
			rec.UID, len(b), maxRecordSize)
	}
	if err := s.writeAtomic(rec.UID, b, durable); err != nil {
		return fmt.Errorf("put checkpoint record for claim %s: %w", rec.UID, err)
	}
	return nil
}

// writeAtomic replaces the record of uid by b with atomicfile: fsynced
// before the rename when durable, the directory fsynced too if enabled. A
// crash at any point leaves either the old record or the new one, plus
// possibly a temp file (".<uid>.json.tmp-*") that Open removes.
func (s *Store) writeAtomic(uid string, b []byte, durable bool) error {
	sync := atomicfile.SyncNone
	switch {
	case durable && s.syncDir:
		sync = atomicfile.SyncAll
	case durable:
		sync = atomicfile.SyncFile
	}
	return atomicfile.Write(filepath.Join(s.dir, uid+fileSuffix), fileMode, sync, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// Get returns the record of uid, or (nil, nil) if there is none. A damaged
// record yields a *CorruptError.
func (s *Store) Get(uid string) (*ClaimRecord, error) {
	if err := model.ValidateUID(uid); err != nil {
		return nil, fmt.Errorf("get checkpoint record: %w", err)
	}
	rec, err := s.read(uid, filepath.Join(s.dir, uid+fileSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return rec, err
}

// read loads and verifies one record file named after uid.
func (s *Store) read(uid, path string) (*ClaimRecord, error) {
	// One byte past the limit, so that decode can tell an oversized file.
	b, err := rawfile.ReadFile(path, recordReadSize, maxRecordSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("read checkpoint record: %w", err)
	}
	rec, cerr := decode(b)
	if cerr != nil {
		cerr.Path = path
		return nil, cerr
	}
	if rec.UID != uid {
		return nil, &CorruptError{Path: path, Reason: fmt.Sprintf(
			"the file is named after claim %s but holds the record of claim %s (was it copied or renamed?)", uid, rec.UID)}
	}
	return rec, nil
}

// Delete removes the record of uid. Deleting a missing record is not an
// error.
func (s *Store) Delete(uid string) error {
	if err := model.ValidateUID(uid); err != nil {
		return fmt.Errorf("delete checkpoint record: %w", err)
	}
	p := filepath.Join(s.dir, uid+fileSuffix)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete checkpoint record %s: %w", p, err)
	}
	if s.syncDir {
		if err := atomicfile.SyncDir(s.dir); err != nil {
			return fmt.Errorf("delete checkpoint record %s: %w", p, err)
		}
	}
	return nil
}
