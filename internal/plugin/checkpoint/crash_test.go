package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A crash can leave a temp file with a newer, partly written record next to
// the real one. It must never be read in place of the real record.
func TestCrashLeavesTempFile(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, testBootID)
	rec := sampleRecord("abc")
	rec.State = PrepareStarted
	require.NoError(t, s.Put(rec))

	newer := *rec
	newer.State = PrepareCompleted
	full, err := encode(&newer)
	require.NoError(t, err)
	for i, n := range []int{0, len(full) / 2, len(full)} { // empty, half, complete but not renamed
		name := filepath.Join(s.Dir(), fmt.Sprintf(".abc.json.tmp-crash%d", i))
		require.NoError(t, os.WriteFile(name, full[:n], 0o600))
	}

	got, err := s.Get("abc")
	require.NoError(t, err)
	assert.Equal(t, PrepareStarted, got.State)
	res, err := s.LoadAll()
	require.NoError(t, err)
	assert.Equal(t, []string{"abc"}, uids(res.Current))
	assert.Equal(t, PrepareStarted, res.Current[0].State)
	assert.Empty(t, res.Corrupt)

	// After a restart the leftovers are gone and the record is unchanged.
	s2 := openTestStore(t, dir, testBootID)
	assertNoTempFiles(t, s2.Dir())
	got, err = s2.Get("abc")
	require.NoError(t, err)
	assert.Equal(t, PrepareStarted, got.State)
}

func TestConcurrentDifferentClaims(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	const workers, rounds = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runClaimLifecycle(s, fmt.Sprintf("claim-%d", w), rounds)
		}()
	}
	// Readers of all claims run alongside.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := s.LoadAll()
			if err == nil && len(res.Corrupt) > 0 {
				err = res.Corrupt[0]
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	res, err := s.LoadAll()
	require.NoError(t, err)
	assert.Len(t, res.Current, workers, "each worker leaves its last record")
	assertNoTempFiles(t, s.Dir())
}

func runClaimLifecycle(s *Store, uid string, rounds int) error {
	for i := range rounds {
		for _, st := range []State{PrepareStarted, PrepareCompleted, UnprepareStarted} {
			rec := sampleRecord(uid)
			rec.State = st
			if err := s.Put(rec); err != nil {
				return err
			}
			got, err := s.Get(uid)
			if err != nil {
				return err
			}
			if got == nil || got.State != st || got.UID != uid {
				return fmt.Errorf("round %d: read back %+v, want state %s", i, got, st)
			}
		}
		if i < rounds-1 {
			if err := s.Delete(uid); err != nil {
				return err
			}
		}
	}
	return nil
}
