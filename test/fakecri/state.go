package fakecri

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// stateWriter appends one JSON line per created container to a file that
// end-to-end tests read. The file is opened per line, so tests may truncate
// or remove it between cases.
type stateWriter struct {
	path string
	mu   sync.Mutex
}

func (w *stateWriter) append(inj *Injection) error {
	line, err := json.Marshal(inj)
	if err != nil {
		return fmt.Errorf("encode state of container %s: %w", inj.ContainerID, err)
	}
	line = append(line, '\n')

	w.mu.Lock()
	defer w.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
		return fmt.Errorf("create directory of state file: %w", err)
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open state file: %w", err)
	}
	if _, err := f.Write(line); err != nil {
		_ = f.Close()
		return fmt.Errorf("append to state file %s: %w", w.path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close state file %s: %w", w.path, err)
	}
	return nil
}

// ReadStateFile returns the containers recorded in a state file, oldest
// first.
func ReadStateFile(path string) ([]Injection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open state file: %w", err)
	}
	defer f.Close()
	var out []Injection
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var inj Injection
		if err := json.Unmarshal(sc.Bytes(), &inj); err != nil {
			return nil, fmt.Errorf("state file %s line %d: %w", path, n, err)
		}
		out = append(out, inj)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read state file %s: %w", path, err)
	}
	return out, nil
}
