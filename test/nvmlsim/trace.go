package nvmlsim

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// tracer logs the NVML calls of a session (see TraceEnv); a nil tracer
// logs nothing.
type tracer struct {
	mu sync.Mutex
	w  io.Writer
	f  *os.File
}

func newTracer(setting string, stderr io.Writer) (*tracer, error) {
	switch setting {
	case "":
		return nil, nil
	case "1", "stderr":
		return &tracer{w: stderr}, nil
	}
	f, err := os.OpenFile(setting, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TraceEnv, err)
	}
	return &tracer{w: f, f: f}, nil
}

func (t *tracer) call(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = fmt.Fprintf(t.w, "nvml %s\n", name)
}

func (t *tracer) close() {
	if t == nil || t.f == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.f.Close()
}
