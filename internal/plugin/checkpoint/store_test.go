package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

const testBootID = "11111111-2222-3333-4444-555555555555"

func fixedBootID(id string) func() (string, error) {
	return func() (string, error) { return id + "\n", nil }
}

func openTestStore(t testing.TB, dir string, bootID string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, SyncDir: true, BootID: fixedBootID(bootID)})
	require.NoError(t, err)
	return s
}

func TestOpen(t *testing.T) {
	t.Run("creates directory 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "checkpoints")
		s := openTestStore(t, dir, testBootID)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
		assert.Equal(t, testBootID, s.BootID(), "boot ID is trimmed")
	})
	t.Run("tightens an existing directory", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o755))
		openTestStore(t, dir, testBootID)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	})
	t.Run("no directory", func(t *testing.T) {
		_, err := Open(Options{BootID: fixedBootID(testBootID)})
		require.ErrorContains(t, err, "Options.Dir")
	})
	t.Run("directory is a file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		_, err := Open(Options{Dir: p, BootID: fixedBootID(testBootID)})
		require.Error(t, err)
	})
	t.Run("boot ID error is wrapped", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := Open(Options{Dir: t.TempDir(), BootID: func() (string, error) { return "", boom }})
		require.ErrorIs(t, err, boom)
	})
	t.Run("empty boot ID", func(t *testing.T) {
		_, err := Open(Options{Dir: t.TempDir(), BootID: fixedBootID("  ")})
		require.ErrorContains(t, err, "boot ID is empty")
	})
	t.Run("kernel boot ID", func(t *testing.T) {
		if _, err := os.Stat(DefaultBootIDPath); err != nil {
			t.Skip("no", DefaultBootIDPath)
		}
		s, err := Open(DefaultOptions(t.TempDir()))
		require.NoError(t, err)
		assert.Len(t, s.BootID(), 36)
		id, err := CurrentBootID()
		require.NoError(t, err)
		assert.Equal(t, s.BootID(), id)
	})
	t.Run("boot ID that cannot name a directory", func(t *testing.T) {
		_, err := Open(Options{Dir: t.TempDir(), BootID: fixedBootID("../x")})
		require.ErrorContains(t, err, "cannot name a directory")
	})
}

func TestPutGetDelete(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	uid := "7c9e6679-7425-40de-944b-e07fc1f90ae7"

	got, err := s.Get(uid)
	require.NoError(t, err)
	assert.Nil(t, got, "missing record is (nil, nil)")

	rec := sampleRecord(uid)
	rec.State = PrepareStarted
	rec.BootID = "ignored"
	before := time.Now()
	require.NoError(t, s.Put(rec))
	assert.Equal(t, testBootID, rec.BootID, "Put stamps the boot ID")
	assert.False(t, rec.Updated.Before(before.Add(-time.Second)), "Put stamps the time")

	got, err = s.Get(uid)
	require.NoError(t, err)
	assert.Equal(t, rec, got)

	rec.State = PrepareCompleted
	require.NoError(t, s.Put(rec))
	got, err = s.Get(uid)
	require.NoError(t, err)
	assert.Equal(t, PrepareCompleted, got.State)

	fi, err := os.Stat(s.Path(uid))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.Equal(t, filepath.Join(s.Dir(), uid+".json"), s.Path(uid))

	require.NoError(t, s.Delete(uid))
	require.NoError(t, s.Delete(uid), "Delete is idempotent")
	got, err = s.Get(uid)
	require.NoError(t, err)
	assert.Nil(t, got)
	assertNoTempFiles(t, s.Dir())
}

func TestPutRejects(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	require.ErrorContains(t, s.Put(nil), "nil")
	rec := sampleRecord("abc")
	rec.State = ""
	require.ErrorContains(t, s.Put(rec), "unknown state")
	rec = sampleRecord("abc")
	rec.Devices[0].Config = []byte("{")
	require.ErrorContains(t, s.Put(rec), "valid JSON")
	assertNoTempFiles(t, s.Dir())
}

func TestUIDValidation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := openTestStore(t, dir, testBootID)
	bad := []string{"", "../x", "a/b", "/abs", "..", ".", "a.b", "a b", "a\x00b", "ü", "a\\b", strings.Repeat("a", 65)}
	for _, uid := range bad {
		t.Run(fmt.Sprintf("%q", model.Truncate(uid, 10)), func(t *testing.T) {
			require.Error(t, model.ValidateUID(uid))
			err := s.Put(&ClaimRecord{UID: uid, State: PrepareStarted})
			require.ErrorContains(t, err, "invalid claim UID")
			_, err = s.Get(uid)
			require.ErrorContains(t, err, "invalid claim UID")
			require.ErrorContains(t, s.Delete(uid), "invalid claim UID")
			assert.Empty(t, s.Path(uid))
		})
	}
	// Nothing escaped the directory.
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	for _, good := range []string{"a", "A-9", strings.Repeat("z", 64), "7c9e6679-7425-40de-944b-e07fc1f90ae7"} {
		require.NoError(t, model.ValidateUID(good), good)
	}
}

func TestGetCorrupt(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	require.NoError(t, s.Put(sampleRecord("abc")))
	p := s.Path("abc")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b[:len(b)/3], 0o600))

	rec, err := s.Get("abc")
	assert.Nil(t, rec)
	var cerr *CorruptError
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, p, cerr.Path)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "truncated")
	_, statErr := os.Stat(p)
	require.NoError(t, statErr, "a corrupt record is never deleted")
}

func TestGetRecordOfOtherClaim(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	require.NoError(t, s.Put(sampleRecord("abc")))
	require.NoError(t, os.Rename(s.Path("abc"), s.Path("xyz")))
	_, err := s.Get("xyz")
	var cerr *CorruptError
	require.ErrorAs(t, err, &cerr)
	assert.Contains(t, cerr.Reason, "holds the record of claim abc")
}

func TestLoadAll(t *testing.T) {
	dir := t.TempDir()
	old := openTestStore(t, dir, "old-boot")
	for _, uid := range []string{"stale-2", "stale-1"} {
		require.NoError(t, old.Put(sampleRecord(uid)))
	}
	s := openTestStore(t, dir, testBootID)
	// "a-b" sorts before "a" by file name ("a-b.json" < "a.json") but after
	// it by UID; results must be in UID order.
	for _, uid := range []string{"c", "a-b", "a"} {
		require.NoError(t, s.Put(sampleRecord(uid)))
	}
	for _, uid := range []string{"bad-2", "bad-1"} {
		require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), uid+".json"), []byte(`{"version":1`), 0o600))
	}
	// Half-written by a power loss in the earlier boot: stale, not corrupt.
	require.NoError(t, os.WriteFile(filepath.Join(old.Dir(), "torn.json"), nil, 0o600))
	// Ignored: foreign files, bad names, directories, temp files.
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "README"), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "a.b.json"), []byte("x"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(s.Dir(), "sub.json"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), ".c.json.tmp-1"), []byte("{"), 0o600))

	res, err := s.LoadAll()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "a-b", "c"}, uids(res.Current))
	assert.Equal(t, []string{"stale-1", "stale-2"}, uids(res.Stale))
	for _, r := range res.Stale {
		assert.Equal(t, "old-boot", r.BootID)
	}
	require.Len(t, res.Corrupt, 2)
	assert.Equal(t, filepath.Join(s.Dir(), "bad-1.json"), res.Corrupt[0].Path)
	assert.Equal(t, filepath.Join(s.Dir(), "bad-2.json"), res.Corrupt[1].Path)
	require.Len(t, res.StaleCorrupt, 1)
	assert.Equal(t, filepath.Join(old.Dir(), "torn.json"), res.StaleCorrupt[0].Path)

	// LoadAll deletes nothing.
	res2, err := s.LoadAll()
	require.NoError(t, err)
	assert.Equal(t, res, res2)

	// PruneStale removes the earlier boot's directory, torn file included,
	// and nothing of this boot.
	require.NoError(t, s.PruneStale())
	assert.NoDirExists(t, old.Dir())
	res3, err := s.LoadAll()
	require.NoError(t, err)
	assert.Empty(t, res3.Stale)
	assert.Empty(t, res3.StaleCorrupt)
	assert.Equal(t, res.Current, res3.Current)
}

func TestPutVolatile(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	rec := sampleRecord("v")
	require.NoError(t, s.PutVolatile(rec))
	got, err := s.Get("v")
	require.NoError(t, err)
	assert.Equal(t, rec.State, got.State)
	assertNoTempFiles(t, s.Dir())
}

func TestLoadAllEmpty(t *testing.T) {
	res, err := openTestStore(t, t.TempDir(), testBootID).LoadAll()
	require.NoError(t, err)
	assert.Empty(t, res.Current)
	assert.Empty(t, res.Stale)
	assert.Empty(t, res.Corrupt)
}

func TestOpenRemovesTempLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, testBootID)
	require.NoError(t, s.Put(sampleRecord("abc")))
	leftovers := []string{".abc.json.tmp-123", ".def.json.tmp-9"}
	for _, name := range leftovers {
		require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), name), []byte(`{"version":1,"chec`), 0o600))
	}
	keep := []string{"abc.json", "notes.tmp-1", ".hidden"}
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "notes.tmp-1"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), ".hidden"), nil, 0o600))

	openTestStore(t, dir, testBootID)
	for _, name := range leftovers {
		assert.NoFileExists(t, filepath.Join(s.Dir(), name))
	}
	for _, name := range keep {
		assert.FileExists(t, filepath.Join(s.Dir(), name))
	}
}

func uids(recs []*ClaimRecord) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.UID)
	}
	return out
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, atomicfile.IsTemp(e.Name()), "temp file left behind: %s", e.Name())
	}
}
