// Package inventory remembers the GPUs the plugin discovered on its node,
// so that a GPU that answers nothing after a restart (fallen off the bus,
// XID 79) is still published from its last known identity, tainted lost:
// the pods bound to it are evicted and the scheduler avoids it, while the
// node's other GPUs serve on. Without it the GPU would either stop the
// plugin or silently vanish from the pool under the claims that hold it.
//
// The inventory is a small JSON file in the plugin's data directory,
// rewritten atomically at every start from what discovery described. A GPU
// that fails discovery is matched to its last known entry by PCI bus ID when
// NVML still reported it, else by NVML index; a GPU never seen before (or
// whose entry now belongs to a GPU that answers) is withheld.
package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// FileName is the inventory's file in the plugin data directory.
const FileName = "last-known-gpus.json"

// version of the file format; a newer one is not read.
const version = 1

type record struct {
	Version int         `json:"version"`
	Node    string      `json:"node"`
	GPUs    []model.GPU `json:"gpus"`
}

// Store is the inventory file of one node.
type Store struct {
	path string
	node string
}

// New returns the store in dir for node; nothing is read yet.
func New(dir, node string) *Store {
	return &Store{path: filepath.Join(dir, FileName), node: node}
}

// Path of the inventory file.
func (s *Store) Path() string { return s.path }

// Load returns the GPUs last saved; none when there is no file. A file that
// cannot be read, is damaged, newer than this plugin or written for another
// node is an error; the inventory is only a memory, so callers go on
// without it.
func (s *Store) Load() ([]model.GPU, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read last known GPUs: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("last known GPUs %s: %w", s.path, err)
	}
	switch {
	case r.Version != version:
		return nil, fmt.Errorf("last known GPUs %s: format version %d, this plugin reads %d", s.path, r.Version, version)
	case r.Node != s.node:
		return nil, fmt.Errorf("last known GPUs %s were recorded on node %q, not %q", s.path, r.Node, s.node)
	}
	return r.GPUs, nil
}

// Save replaces the file with gpus by atomicfile.WriteFile, so a crash or a
// power loss leaves the old or the new file, never a torn one. An unchanged
// inventory is not rewritten.
func (s *Store) Save(gpus []model.GPU) error {
	data, err := json.MarshalIndent(record{Version: version, Node: s.node, GPUs: gpus}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if old, err := os.ReadFile(s.path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := atomicfile.WriteFile(s.path, data, 0o600); err != nil {
		return fmt.Errorf("save last known GPUs: %w", err)
	}
	return nil
}

// Restore completes a freshly discovered node from the store: each
// unavailable GPU is published from its last known identity or withheld
// (see Reconcile), then the inventory is saved. Store errors are logged,
// never returned: without its memory the plugin withholds unavailable GPUs,
// as on a new node. Call it before the node's GPUs are partitioned.
func Restore(ctx context.Context, s *Store, node *model.Node) {
	logger := klog.FromContext(ctx)
	known, err := s.Load()
	if err != nil {
		logger.Error(err, "Last known GPUs unavailable; GPUs that do not answer are withheld", "path", s.path)
	}
	remember := Reconcile(node, known)
	for _, u := range node.Unavailable {
		if u.PublishedAs != "" {
			logger.Info("GPU does not answer NVML; published from its last known identity, tainted "+u.Reason,
				"index", u.Index, "device", u.PublishedAs, "error", u.Error)
			continue
		}
		logger.Error(u.Err, "GPU does not answer NVML and is not published", "index", u.Index, "uuid", u.UUID,
			"pciBusID", u.PCIBusID, "why", u.Withheld)
	}
	if err := s.Save(remember); err != nil {
		logger.Error(err, "Last known GPUs not saved; a GPU lost later may be withheld after a restart", "path", s.path)
	}
}
