package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/internal/shared/rawfile"
)

// Holder records that a claim holds a device of this node. Holders live next
// to this boot's records (<dir>/<bootID>/holders/<device>/<claimUID>), so
// every plugin process on the node — two during a rolling update — sees the
// same index. The caller serializes changes per device (internal/plugin/prepare holds a
// file lock on the device).
//
// A holder is written after its claim's record and removed before it, so a
// holder never outlives its record; Recover relies on that ordering.
type Holder struct {
	ClaimUID string
	// Claim is "namespace/name", for messages.
	Claim string
	// Access is how the claim holds the device (exclusive, share, admin).
	Access string
}

const (
	holdersDir = "holders"
	// holderReadSize fits "<access> <namespace>/<name>" of any claim.
	holderReadSize = 512
	// maxHolderSize bounds what is read of a holder file; past it the
	// claim's name (used in messages only) is cut.
	maxHolderSize = 4 << 10
)

func (s *Store) holderDir(device string) (string, error) {
	if err := validateDeviceName(device); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, holdersDir, device), nil
}

// AddHolder marks uid as holding device. The file is replaced atomically
// (a crash never leaves it empty or half written) but not fsynced: like
// PrepareStarted, it only has to survive a crash of the process. Holders
// skips the temp file of an interrupted write: its name is no UID.
func (s *Store) AddHolder(device string, h Holder) error { return s.AddHolders(h, device) }

// AddHolders marks h.ClaimUID as holding each of devices, with the same
// content. The first holder is written as AddHolder does; the others are
// hard links to it, so a claim of eight GPUs creates one file, not eight
// (on a node's file system each new file costs an inode and a data block;
// a link costs a directory entry). Readers see eight regular files with the
// same content either way. Where a link cannot be made (the holder exists
// from an interrupted attempt, or the file system refuses), that holder is
// written on its own.
func (s *Store) AddHolders(h Holder, devices ...string) error {
	if err := model.ValidateUID(h.ClaimUID); err != nil {
		return fmt.Errorf("add holder: %w", err)
	}
	content := h.Access + " " + h.Claim
	first := ""
	for _, device := range devices {
		dir, err := s.holderDir(device)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, h.ClaimUID)
		if first != "" {
			err := os.Link(first, path)
			if errors.Is(err, fs.ErrNotExist) {
				// The device has no holder directory yet.
				if err := os.MkdirAll(dir, dirMode); err != nil {
					return fmt.Errorf("add holder of %s: %w", device, err)
				}
				err = os.Link(first, path)
			}
			if err == nil {
				continue
			}
		}
		if err := writeHolder(dir, path, content); err != nil {
			return fmt.Errorf("add holder of %s: %w", device, err)
		}
		if first == "" {
			first = path
		}
	}
	return nil
}

// writeHolder replaces the holder file path in dir by one with content.
func writeHolder(dir, path, content string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	return atomicfile.Write(path, fileMode, atomicfile.SyncNone, func(w io.Writer) error {
		_, err := io.WriteString(w, content)
		return err
	})
}

// RemoveHolder removes uid from the holders of device; missing is fine.
func (s *Store) RemoveHolder(device, uid string) error {
	dir, err := s.holderDir(device)
	if err != nil {
		return err
	}
	if err := model.ValidateUID(uid); err != nil {
		return fmt.Errorf("remove holder of %s: %w", device, err)
	}
	if err := os.Remove(filepath.Join(dir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove holder %s of %s: %w", uid, device, err)
	}
	return nil
}

// Holders lists the claims holding device.
func (s *Store) Holders(device string) ([]Holder, error) {
	dir, err := s.holderDir(device)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list holders of %s: %w", device, err)
	}
	out := make([]Holder, 0, len(entries))
	for _, e := range entries {
		if model.ValidateUID(e.Name()) != nil || !e.Type().IsRegular() {
			continue
		}
		b, err := rawfile.ReadFile(filepath.Join(dir, e.Name()), holderReadSize, maxHolderSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read holder %s of %s: %w", e.Name(), device, err)
		}
		access, claim, _ := strings.Cut(string(b), " ")
		out = append(out, Holder{ClaimUID: e.Name(), Claim: claim, Access: access})
	}
	return out, nil
}

// HeldDevices returns, for every device with at least one holder, its
// holders' claim UIDs.
func (s *Store) HeldDevices() (map[string][]string, error) {
	root := filepath.Join(s.dir, holdersDir)
	devices, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list held devices: %w", err)
	}
	out := map[string][]string{}
	for _, d := range devices {
		if !d.IsDir() {
			continue
		}
		hs, err := s.Holders(d.Name())
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			out[d.Name()] = append(out[d.Name()], h.ClaimUID)
		}
	}
	return out, nil
}

// validateDeviceName keeps device names usable as directory names.
func validateDeviceName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("invalid device name %q: must be 1 to 128 characters", name)
	}
	for _, c := range name {
		allowed := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
		if !allowed {
			return fmt.Errorf("invalid device name %q: only lower-case letters, digits and '-' are allowed", name)
		}
	}
	return nil
}
