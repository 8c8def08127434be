// Package e2elogs keeps what explains an e2e test's failure after the fact:
// every container log of the driver's pods, streamed through the API server
// while the pods live (the kubelet removes a deleted pod's logs, and a
// rolling update or a helm upgrade deletes the plugin pods a failure needs),
// and, for a failed test, the lines of those logs and of the cluster's own
// components written within the test's time.
package e2elogs

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"time"
)

// LineTime is the time a log line was written, from the first of:
//   - an RFC 3339 time before the first space (a container log streamed
//     with timestamps);
//   - a klog header ("I1129 14:42:07.123456 ..."), which has no year: the
//     year and location are those of ref, and a header more than a day
//     after ref is taken as the year before (a run across New Year);
//   - logrus' `time="..."` field (containerd).
func LineTime(line string, ref time.Time) (time.Time, bool) {
	if t, ok := prefixTime(line); ok {
		return t, true
	}
	if t, ok := klogTime(line, ref); ok {
		return t, true
	}
	if _, rest, ok := strings.Cut(line, `time="`); ok {
		if v, _, ok := strings.Cut(rest, `"`); ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// prefixTime is the RFC 3339 time a line starts with, up to its first space.
func prefixTime(line string) (time.Time, bool) {
	i := strings.IndexByte(line, ' ')
	if i <= 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, line[:i])
	return t, err == nil
}

// klogTime parses klog's "Lmmdd hh:mm:ss.uuuuuu" header.
func klogTime(line string, ref time.Time) (time.Time, bool) {
	const header = "0102 15:04:05.000000"
	if len(line) < 1+len(header) || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("2006"+header, ref.Format("2006")+line[1:1+len(header)], ref.Location())
	if err != nil {
		return time.Time{}, false
	}
	if t.Sub(ref) > 24*time.Hour {
		t = t.AddDate(-1, 0, 0)
	}
	return t, true
}

// CopyWindow copies the lines of r written from from to to (both included)
// to w and returns how many it copied. A line without a time of its own (a
// multi-line message's continuation) goes with the line before it; lines
// before the first timed line are dropped.
func CopyWindow(w io.Writer, r io.Reader, from, to time.Time) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	in, n := false, 0
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if t, ok := LineTime(line, to); ok {
				in = !t.Before(from) && !t.After(to)
			}
			if in {
				if !strings.HasSuffix(line, "\n") {
					line += "\n"
				}
				if _, werr := io.WriteString(w, line); werr != nil {
					return n, werr
				}
				n++
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
