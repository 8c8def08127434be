package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"strconv"
	"strings"
)

// maxRecordSize bounds a record file. Real records are a few KiB; anything
// far larger is damage, and refusing it keeps a bad file from exhausting
// memory at startup.
const maxRecordSize = 4 << 20

const checksumPrefix = "sha256:"

// recoveryHint tells the operator what to do about a damaged record.
const recoveryHint = "the file was left in place because deleting it could leak a GPU: " +
	"make sure no container uses the claim's GPUs and delete the file, or restore it " +
	"(see internal/plugin/checkpoint/README.md, \"Recovering a corrupted checkpoint\")"

// CorruptError reports a record file that exists but cannot be trusted. The
// file is never deleted automatically.
type CorruptError struct {
	// Path of the damaged file.
	Path string
	// Reason says what is wrong with it.
	Reason string

	err error // underlying error, if any
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint record %s is corrupt: %s; %s", e.Path, e.Reason, recoveryHint)
}

// Unwrap returns the underlying error, if any (e.g. a *json.SyntaxError).
func (e *CorruptError) Unwrap() error { return e.err }

func corrupt(err error, format string, args ...any) *CorruptError {
	return &CorruptError{Reason: fmt.Sprintf(format, args...), err: err}
}

// envelope is the on-disk wrapper around a record.
type envelope struct {
	Version  *int            `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// encode serializes rec into a versioned, checksummed envelope.
func encode(rec *ClaimRecord) ([]byte, error) {
	data, err := marshalCompact(rec)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint record for claim %s: %w (the device config must be valid JSON)", rec.UID, err)
	}
	sum := sha256.Sum256(data)
	buf := make([]byte, 0, len(data)+128)
	buf = append(buf, `{"version":`...)
	buf = strconv.AppendInt(buf, CurrentVersion, 10)
	buf = append(buf, `,"checksum":"`+checksumPrefix...)
	buf = hex.AppendEncode(buf, sum[:])
	buf = append(buf, `","data":`...)
	buf = append(buf, data...)
	buf = append(buf, "}\n"...)
	return buf, nil
}

// marshalCompact encodes v without HTML escaping, so that the opaque device
// config keeps its bytes through a write and read.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// decode parses and verifies an envelope. Errors are *CorruptError with an
// empty Path; the caller fills it in.
func decode(b []byte) (*ClaimRecord, *CorruptError) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, corrupt(nil, "the file is empty")
	}
	if len(b) > maxRecordSize {
		return nil, corrupt(nil, "the file is %d bytes, more than the %d-byte limit for a record", len(b), maxRecordSize)
	}

	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn) && strings.Contains(syn.Error(), "unexpected end of JSON input"):
			return nil, corrupt(err, "the file is truncated (%v)", err)
		case errors.As(err, &syn):
			return nil, corrupt(err, "the file is not valid JSON: %v at byte %d", err, syn.Offset)
		default:
			return nil, corrupt(err, "the file is not a checkpoint envelope: %v", err)
		}
	}

	if env.Version == nil {
		return nil, corrupt(nil, "the envelope has no \"version\" field")
	}
	if v := *env.Version; v > CurrentVersion {
		return nil, corrupt(nil, "the record has format version %d, but this gpudra binary reads only versions up to %d "+
			"(it was written by a newer gpudra; run that version again or recover the record by hand)", v, CurrentVersion)
	} else if v < 1 {
		return nil, corrupt(nil, "the record has invalid format version %d (versions start at 1)", v)
	}

	want, err := parseChecksum(env.Checksum)
	if err != nil {
		return nil, corrupt(err, "%v", err)
	}
	if env.Data == nil {
		return nil, corrupt(nil, "the envelope has no \"data\" field")
	}
	if got := sha256.Sum256(env.Data); !bytes.Equal(got[:], want) {
		return nil, corrupt(nil, "checksum mismatch: the envelope says %s%x but the data hashes to %s%x (the data was modified or damaged)",
			checksumPrefix, want, checksumPrefix, got)
	}

	rec := new(ClaimRecord)
	if err := json.Unmarshal(env.Data, rec); err != nil {
		return nil, corrupt(err, "the record data does not match the record schema: %v", err)
	}
	if err := model.ValidateUID(rec.UID); err != nil {
		return nil, corrupt(err, "the record holds an %v", err)
	}
	if !rec.State.Valid() {
		return nil, corrupt(nil, "the record has unknown state %q (want %s, %s or %s)",
			model.Truncate(string(rec.State), 80), PrepareStarted, PrepareCompleted, UnprepareStarted)
	}
	for i := range rec.Devices {
		rec.Devices[i].Config = normalizeRaw(rec.Devices[i].Config)
	}
	return rec, nil
}

// parseChecksum parses "sha256:<64 hex digits>".
func parseChecksum(s string) ([]byte, error) {
	hexSum, ok := strings.CutPrefix(s, checksumPrefix)
	if !ok {
		if s == "" {
			return nil, errors.New("the envelope has no \"checksum\" field")
		}
		return nil, fmt.Errorf("checksum %q does not start with %q", model.Truncate(s, 80), checksumPrefix)
	}
	sum, err := hex.DecodeString(hexSum)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("checksum %q is not %s followed by %d hex digits", model.Truncate(s, 80), checksumPrefix, 2*sha256.Size)
	}
	return sum, nil
}

// normalizeRaw compacts already validated JSON and maps "null" to nil, so
// that a decoded record encodes back to the same bytes.
func normalizeRaw(raw json.RawMessage) json.RawMessage {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		// Unreachable: the decoder has already checked the syntax.
		return raw
	}
	return b.Bytes()
}
