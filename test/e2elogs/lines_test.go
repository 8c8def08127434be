package e2elogs

import (
	"strings"
	"testing"
	"time"
)

func TestLineTime(t *testing.T) {
	ref := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	newYear := time.Date(2027, 1, 1, 0, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		line string
		ref  time.Time
		want time.Time
		ok   bool
	}{
		{"streamed with timestamps", "2026-11-29T14:42:07.123456789Z I1129 14:42:07.1 1 x.go:1] msg", ref,
			time.Date(2026, 11, 29, 14, 42, 7, 123456789, time.UTC), true},
		{"streamed, trailing zeros trimmed", "2026-11-29T14:42:07.12Z msg", ref,
			time.Date(2026, 11, 29, 14, 42, 7, 120000000, time.UTC), true},
		{"klog header", "I1129 14:42:07.123456    1234 kubelet.go:12] msg", ref,
			time.Date(2026, 11, 29, 14, 42, 7, 123456000, time.UTC), true},
		{"klog error header", "E1129 14:42:07.000001 1 x.go:1] failed", ref,
			time.Date(2026, 11, 29, 14, 42, 7, 1000, time.UTC), true},
		{"klog header of the year before the reference", "W1231 23:59:59.000000 1 x.go:1] late", newYear,
			time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"logrus", `time="2026-11-29T14:42:07.5Z" level=info msg="started"`, ref,
			time.Date(2026, 11, 29, 14, 42, 7, 500000000, time.UTC), true},
		{"continuation", "\tgoroutine 1 [running]:", ref, time.Time{}, false},
		{"looks like klog but is not", "I am a line", ref, time.Time{}, false},
		{"empty", "", ref, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := LineTime(tc.line, tc.ref)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("LineTime(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestCopyWindow(t *testing.T) {
	in := strings.Join([]string{
		"orphan continuation before any time",
		"I1129 14:00:00.000000 1 a.go:1] before",
		"  its continuation",
		"I1129 14:00:10.000000 1 a.go:1] first in",
		"  continuation of the first in",
		"2026-11-29T14:00:15Z a container's line",
		"I1129 14:00:20.000000 1 a.go:1] last in",
		"I1129 14:00:21.000000 1 a.go:1] after",
		"  continuation after",
		"I1129 14:00:19.000000 1 a.go:1] a late writer's line back in the window",
	}, "\n") // no final newline: the last line still counts
	from := time.Date(2026, 11, 29, 14, 0, 10, 0, time.UTC)
	to := time.Date(2026, 11, 29, 14, 0, 20, 0, time.UTC)
	var b strings.Builder
	n, err := CopyWindow(&b, strings.NewReader(in), from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"I1129 14:00:10.000000 1 a.go:1] first in",
		"  continuation of the first in",
		"2026-11-29T14:00:15Z a container's line",
		"I1129 14:00:20.000000 1 a.go:1] last in",
		"I1129 14:00:19.000000 1 a.go:1] a late writer's line back in the window",
	}, "\n") + "\n"
	if b.String() != want || n != 5 {
		t.Errorf("copied %d lines:\n%s\nwant 5:\n%s", n, b.String(), want)
	}
}
