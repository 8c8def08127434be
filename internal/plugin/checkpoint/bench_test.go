package checkpoint

import (
	"fmt"
	"testing"
)

// BenchmarkPut measures one atomic record write, with and without the
// directory fsync. Results depend heavily on the file system and disk.
func BenchmarkPut(b *testing.B) {
	for _, syncDir := range []bool{true, false} {
		b.Run(fmt.Sprintf("SyncDir=%t", syncDir), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), SyncDir: syncDir, BootID: fixedBootID(testBootID)})
			if err != nil {
				b.Fatal(err)
			}
			rec := sampleRecord("7c9e6679-7425-40de-944b-e07fc1f90ae7")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rec.State = []State{PrepareStarted, PrepareCompleted}[i%2]
				if err := s.Put(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
