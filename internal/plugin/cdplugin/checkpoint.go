package cdplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// checkpointFile is the prepared claims' record in the plugin data dir.
const checkpointFile = "checkpoint.json"

// checkpointVersion is the record's format; another one is refused.
const checkpointVersion = 1

type checkpointData struct {
	Version int                           `json:"version"`
	Node    string                        `json:"node"`
	Claims  []computedomain.PreparedClaim `json:"claims"`
}

// saveCheckpoint records the claims Node holds (written and renamed, so
// that a crash leaves the old or the new record).
func saveCheckpoint(path, node string, claims []computedomain.PreparedClaim) error {
	claims = slices.Clone(claims)
	slices.SortFunc(claims, func(a, b computedomain.PreparedClaim) int { return strings.Compare(string(a.UID), string(b.UID)) })
	data, err := json.Marshal(checkpointData{Version: checkpointVersion, Node: node, Claims: claims})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write the checkpoint of prepared ComputeDomain claims: %w", err)
	}
	return nil
}

// loadCheckpoint reads what saveCheckpoint wrote; none is no claims. A
// record of another node (a copied data dir) is refused.
func loadCheckpoint(path, node string) ([]computedomain.PreparedClaim, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint of prepared ComputeDomain claims: %w", err)
	}
	var c checkpointData
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s is not a checkpoint of ComputeDomain claims: %w; remove it only if no pod on this node uses IMEX channels", path, err)
	}
	switch {
	case c.Version != checkpointVersion:
		return nil, fmt.Errorf("%s has format version %d, this plugin reads %d", path, c.Version, checkpointVersion)
	case c.Node != node:
		return nil, fmt.Errorf("%s records claims of node %q, not of this node %q", path, c.Node, node)
	}
	return c.Claims, nil
}
