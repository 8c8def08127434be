package e2elogs

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is an Opener that answers each open with the next of its streams
// and records the since it was asked for.
type script struct {
	mu      sync.Mutex
	streams []string // "" answers an error (the container not started)
	sinces  []string
	done    chan struct{} // closed when the streams are used up
	once    sync.Once
}

func (s *script) open(_ context.Context, since *time.Time) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := "start"
	if since != nil {
		sv = since.UTC().Format(time.RFC3339Nano)
	}
	s.sinces = append(s.sinces, sv)
	if len(s.streams) == 0 {
		s.once.Do(func() { close(s.done) })
		return nil, errors.New("no more streams")
	}
	next := s.streams[0]
	s.streams = s.streams[1:]
	if next == "" {
		return nil, errors.New("container not started")
	}
	return io.NopCloser(strings.NewReader(next)), nil
}

func TestFollow(t *testing.T) {
	s := &script{
		done: make(chan struct{}),
		streams: []string{
			"", // not started yet: opened again from the start
			"2026-11-29T14:00:01Z one\n2026-11-29T14:00:02.5Z two\n2026-11-29T14:00:03Z thr",
			// The log opened again from 14:00:02.5 repeats its second,
			// then the line cut short comes whole (the container restarted).
			"2026-11-29T14:00:02Z zero, before the last copied line\n2026-11-29T14:00:02.5Z two\n2026-11-29T14:00:03Z three\n2026-11-29T14:00:04Z four\n",
			"2026-11-29T14:00:04Z four\n",
		},
	}
	var out strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		Follow(ctx, s.open, &out, time.Millisecond)
	}()
	<-s.done
	cancel()
	<-stopped
	want := "2026-11-29T14:00:01Z one\n2026-11-29T14:00:02.5Z two\n2026-11-29T14:00:03Z three\n2026-11-29T14:00:04Z four\n"
	if out.String() != want {
		t.Errorf("copied:\n%s\nwant:\n%s", out.String(), want)
	}
	wantSinces := []string{"start", "start", "2026-11-29T14:00:02.5Z", "2026-11-29T14:00:04Z", "2026-11-29T14:00:04Z"}
	// Opens after the last stream (until the cancel) are not counted.
	if got := s.sinces[:min(len(s.sinces), len(wantSinces))]; strings.Join(got, " ") != strings.Join(wantSinces, " ") {
		t.Errorf("opened from %v, want %v", s.sinces, wantSinces)
	}
}
