package cdplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
)

// recordsDir is the directory of the prepared claims' records in the plugin
// data dir: one file <claim UID>.json per claim, so that two instances of
// the plugin (a rolling update's overlap) each write and remove only the
// records of the claims they prepare and unprepare.
const recordsDir = "claims"

// recordSuffix ends a record's file name.
const recordSuffix = ".json"

// checkpointFile is the previous version's record of all prepared claims in
// one file, converted into records at start (migrateCheckpoint).
const checkpointFile = "checkpoint.json"

// checkpointVersion is the format of a record and of the previous
// checkpointFile; another one is refused.
const checkpointVersion = 1

// recordData is one prepared claim's record.
type recordData struct {
	Version int                         `json:"version"`
	Node    string                      `json:"node"`
	Claim   computedomain.PreparedClaim `json:"claim"`
}

// checkpointData is the previous version's checkpointFile.
type checkpointData struct {
	Version int                           `json:"version"`
	Node    string                        `json:"node"`
	Claims  []computedomain.PreparedClaim `json:"claims"`
}

// lockFile, in the plugin data dir, is the records' lock (records.Lock).
const lockFile = "claims.lock"

// records are the per-claim records of one node in dir, the
// computedomain.Store of the plugin: every instance of the node reads and
// writes them under the flock of lock.
type records struct {
	dir, node, lock string
}

// newRecords are the records of node in the plugin data dir dataDir.
func newRecords(dataDir, node string) records {
	return records{dir: filepath.Join(dataDir, recordsDir), node: node, lock: filepath.Join(dataDir, lockFile)}
}

// path is the record file of uid, or an error if uid cannot name a file.
func (r records) path(uid types.UID) (string, error) {
	if err := model.ValidateUID(string(uid)); err != nil {
		return "", fmt.Errorf("record of a prepared ComputeDomain claim: %w", err)
	}
	return filepath.Join(r.dir, string(uid)+recordSuffix), nil
}

// put writes the record of c (written and renamed, so that a crash leaves
// the old or the new record).
func (r records) put(c computedomain.PreparedClaim) error {
	path, err := r.path(c.UID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(recordData{Version: checkpointVersion, Node: r.node, Claim: c})
	if err != nil {
		return fmt.Errorf("encode the record of prepared ComputeDomain claim %s: %w", c.UID, err)
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("create the directory of prepared ComputeDomain claims: %w", err)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write the record of prepared ComputeDomain claim %s: %w", c.UID, err)
	}
	return nil
}

// remove removes the record of uid; none is removed already.
func (r records) remove(uid types.UID) error {
	path, err := r.path(uid)
	if err != nil {
		return err
	}
	switch err := os.Remove(path); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("remove the record of prepared ComputeDomain claim %s: %w", uid, err)
	}
	// A record back after a power loss would hold the node in the domain.
	if err := atomicfile.SyncDir(r.dir); err != nil {
		return fmt.Errorf("remove the record of prepared ComputeDomain claim %s: %w", uid, err)
	}
	return nil
}

// load reads every record, sorted by UID; no directory is no claims. Temp
// files of writes (atomicfile.IsTemp; another instance may be writing) and
// names that are not <claim UID>.json are skipped. A record that cannot be
// decoded, of another node (a copied data dir), of another format version
// or under another claim's name is refused with an error naming the file.
func (r records) load(ctx context.Context) ([]computedomain.PreparedClaim, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the records of prepared ComputeDomain claims: %w", err)
	}
	var out []computedomain.PreparedClaim
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), recordSuffix)
		if atomicfile.IsTemp(e.Name()) || !ok || model.ValidateUID(uid) != nil || !e.Type().IsRegular() {
			klog.FromContext(ctx).V(4).Info("Skipping a file that is no claim record", "file", filepath.Join(r.dir, e.Name()))
			continue
		}
		c, err := r.read(filepath.Join(r.dir, e.Name()), types.UID(uid))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by an unprepare meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (r records) read(path string, uid types.UID) (computedomain.PreparedClaim, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return computedomain.PreparedClaim{}, fmt.Errorf("read the record of prepared ComputeDomain claim %s: %w", uid, err)
	}
	var rec recordData
	if err := json.Unmarshal(data, &rec); err != nil {
		return computedomain.PreparedClaim{}, fmt.Errorf("%s is not a record of a prepared ComputeDomain claim: %w; %s", path, err, removeHint)
	}
	if err := r.check(path, rec.Version, rec.Node); err != nil {
		return computedomain.PreparedClaim{}, err
	}
	if rec.Claim.UID != uid {
		return computedomain.PreparedClaim{}, fmt.Errorf("%s records claim %q, not the claim %q its name says; %s", path, rec.Claim.UID, uid, removeHint)
	}
	return rec.Claim, nil
}

// removeHint says what to do with a record the plugin refuses.
const removeHint = "remove it only if no pod on this node uses this claim's IMEX channels (or IMEX daemon)"

// check refuses a record or checkpoint of another format version or node.
func (r records) check(path string, version int, node string) error {
	switch {
	case version != checkpointVersion:
		return fmt.Errorf("%s has format version %d, this plugin reads %d: run the plugin version that wrote it, or %s",
			path, version, checkpointVersion, removeHint)
	case node != r.node:
		return fmt.Errorf("%s records claims of node %q, not of this node %q (a copied plugin directory?); %s", path, node, r.node, removeHint)
	}
	return nil
}

// migrateCheckpoint converts the previous version's checkpointFile at path,
// if there is one, into records and then removes it: a crash in between
// leaves both, and the next start converts it again. A claim that already
// has a record keeps it (the record was written later).
func (r records) migrateCheckpoint(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the checkpoint of prepared ComputeDomain claims: %w", err)
	}
	var c checkpointData
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s is not a checkpoint of ComputeDomain claims: %w; remove it only if no pod on this node uses IMEX channels", path, err)
	}
	if err := r.check(path, c.Version, c.Node); err != nil {
		return err
	}
	have, err := r.load(ctx)
	if err != nil {
		return err
	}
	converted := 0
	for _, claim := range c.Claims {
		if slices.ContainsFunc(have, func(h computedomain.PreparedClaim) bool { return h.UID == claim.UID }) {
			continue
		}
		if err := r.put(claim); err != nil {
			return fmt.Errorf("convert %s into records: %w", path, err)
		}
		converted++
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s after converting it into records: %w", path, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("remove %s after converting it into records: %w", path, err)
	}
	klog.FromContext(ctx).Info("Converted the checkpoint of prepared ComputeDomain claims into one record per claim",
		"checkpoint", path, "claims", len(c.Claims), "converted", converted, "recordsDir", r.dir)
	return nil
}
