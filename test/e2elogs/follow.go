package e2elogs

import (
	"bufio"
	"context"
	"io"
	"time"
)

// Opener opens a container's log, with an RFC 3339 time before each line,
// from since on (nil: from its start). The API server's PodLogOptions take a
// SinceTime of whole seconds, so a reopened log repeats lines.
type Opener func(ctx context.Context, since *time.Time) (io.ReadCloser, error)

// Follow copies a container's log to w until ctx ends. Each time the stream
// ends (the container exited or restarted, the connection broke, the
// container has not started yet) it waits retry and opens the log again
// from the last copied line's time, skipping the lines up to that time, so
// that each line is copied once. Two lines with the same nanosecond across a
// reopen lose the second: the price of deduplicating by time.
func Follow(ctx context.Context, open Opener, w io.Writer, retry time.Duration) {
	var last time.Time
	for ctx.Err() == nil {
		var since *time.Time
		if !last.IsZero() {
			s := last
			since = &s
		}
		if rc, err := open(ctx, since); err == nil {
			last = copyAfter(w, rc, last)
			_ = rc.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// copyAfter copies the lines of r stamped after last and returns the time
// of the last line it read.
func copyAfter(w io.Writer, r io.Reader, last time.Time) time.Time {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			// EOF or a broken stream: a line cut short comes again, whole,
			// when the log is opened again from its time.
			return last
		}
		t, ok := prefixTime(line)
		if !ok || t.After(last) {
			_, _ = io.WriteString(w, line)
		}
		if ok && t.After(last) {
			last = t
		}
	}
}
