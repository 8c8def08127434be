package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// LoadResult sorts the records found by LoadAll.
type LoadResult struct {
	// Current holds the records written during this boot, sorted by UID.
	Current []*ClaimRecord
	// Stale holds the records written during an earlier boot, sorted by
	// UID. Their containers are gone; the caller cleans up what they left
	// (e.g. CDI specs) and then calls PruneStale.
	Stale []*ClaimRecord
	// StaleCorrupt lists unreadable files of earlier boots (e.g. half
	// written when the power went). They hold nothing that is still in use.
	StaleCorrupt []*CorruptError
	// Corrupt holds one error per damaged record file of this boot, sorted
	// by path. Those files are left in place.
	Corrupt []*CorruptError
}

// LoadAll reads every record, of this boot and of earlier ones, and
// classifies it. It deletes nothing. It ignores temp files and files that are
// not named "<valid UID>.json". An error is returned only when a file or a
// directory cannot be read at all, since the plugin cannot then know what is
// prepared.
func (s *Store) LoadAll() (*LoadResult, error) {
	res := &LoadResult{}
	if err := s.loadDir(s.dir, res, false); err != nil {
		return nil, err
	}
	boots, err := s.staleBootDirs()
	if err != nil {
		return nil, err
	}
	for _, dir := range boots {
		if err := s.loadDir(dir, res, true); err != nil {
			return nil, err
		}
	}
	byUID := func(a, b *ClaimRecord) int { return cmp.Compare(a.UID, b.UID) }
	byPath := func(a, b *CorruptError) int { return cmp.Compare(a.Path, b.Path) }
	slices.SortFunc(res.Current, byUID)
	slices.SortFunc(res.Stale, byUID)
	slices.SortFunc(res.Corrupt, byPath)
	slices.SortFunc(res.StaleCorrupt, byPath)
	return res, nil
}

func (s *Store) loadDir(dir string, res *LoadResult, stale bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("load checkpoint records: list %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		uid, ok := strings.CutSuffix(name, fileSuffix)
		if !ok || model.ValidateUID(uid) != nil || !e.Type().IsRegular() {
			continue
		}
		rec, err := s.read(uid, filepath.Join(dir, name))
		var cerr *CorruptError
		switch {
		case errors.As(err, &cerr) && stale:
			res.StaleCorrupt = append(res.StaleCorrupt, cerr)
		case errors.As(err, &cerr):
			res.Corrupt = append(res.Corrupt, cerr)
		case errors.Is(err, fs.ErrNotExist):
			// Deleted between listing and reading.
		case err != nil:
			return fmt.Errorf("load checkpoint records: %w", err)
		case !stale && rec.BootID == s.bootID:
			res.Current = append(res.Current, rec)
		default:
			res.Stale = append(res.Stale, rec)
		}
	}
	return nil
}

// staleBootDirs lists the record directories of earlier boots.
func (s *Store) staleBootDirs() ([]string, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint records: list %s: %w", s.root, err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != s.bootID && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, filepath.Join(s.root, e.Name()))
		}
	}
	return dirs, nil
}

// PruneStale removes the record directories of earlier boots, after the
// caller has cleaned up what their records describe.
func (s *Store) PruneStale() error {
	dirs, err := s.staleBootDirs()
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove checkpoint records of an earlier boot (%s): %w", dir, err)
		}
	}
	return nil
}
