package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const goldenV1 = "testdata/v1-prepare-completed.json"

// sampleRecord is a fully populated record.
func sampleRecord(uid string) *ClaimRecord {
	return &ClaimRecord{
		UID:       uid,
		Namespace: "team-a",
		Name:      "train-gpus",
		State:     PrepareCompleted,
		BootID:    "0b1e6f42-5c1a-4b7e-9d55-2a4f5e0c9a11",
		Updated:   time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC),
		Devices: []Device{
			{
				Pool:         "node-1",
				Name:         "gpu-3",
				Requests:     []string{"gpus"},
				UUID:         "GPU-8f6a2b1c-0d3e-4f5a-9b8c-7d6e5f4a3b2c",
				ShareID:      "share-1",
				CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + uid + "-gpu-3"},
				Config:       json.RawMessage(`{"sharing":{"strategy":"TimeSlicing"},"note":"<a&b>"}`),
			},
			{
				Pool:         "node-1",
				Name:         "gpu-4",
				Requests:     []string{"gpus", "extra"},
				UUID:         "GPU-11111111-2222-3333-4444-555555555555",
				CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + uid + "-gpu-4"},
			},
		},
	}
}

// envelopeWith wraps hand-written data bytes in a valid envelope.
func envelopeWith(version int, data string) []byte {
	sum := sha256.Sum256([]byte(data))
	return fmt.Appendf(nil, `{"version":%d,"checksum":"sha256:%s","data":%s}`, version, hex.EncodeToString(sum[:]), data)
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	rec := sampleRecord("7c9e6679-7425-40de-944b-e07fc1f90ae7")
	b, err := encode(rec)
	require.NoError(t, err)
	got, cerr := decode(b)
	require.Nil(t, cerr)
	assert.Equal(t, rec, got)
	// HTML-significant characters in the opaque config survive byte for byte.
	assert.Equal(t, string(rec.Devices[0].Config), string(got.Devices[0].Config))
}

func TestEncodeUsesLowerCamelCase(t *testing.T) {
	b, err := encode(sampleRecord("abc"))
	require.NoError(t, err)
	s := string(b)
	assert.True(t, strings.HasPrefix(s, `{"version":1,"checksum":"sha256:`), s)
	for _, key := range []string{`"uid":`, `"namespace":`, `"name":`, `"state":`, `"bootID":`, `"updated":`,
		`"devices":`, `"pool":`, `"requests":`, `"uuid":`, `"shareID":`, `"cdiDeviceIDs":`, `"config":`} {
		assert.Contains(t, s, key)
	}
}

func TestEncodeRejectsInvalidConfig(t *testing.T) {
	rec := sampleRecord("abc")
	rec.Devices[0].Config = json.RawMessage(`{not json`)
	_, err := encode(rec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device config must be valid JSON")
}

// A newer binary may add fields anywhere; an older one must still read the
// record as long as the version is unchanged.
func TestDecodeIgnoresUnknownFields(t *testing.T) {
	data := `{"uid":"abc","namespace":"ns","name":"n","state":"PrepareStarted","bootID":"b",` +
		`"updated":"2025-01-02T03:04:05Z","futureTopLevel":{"x":[1,2,3]},` +
		`"devices":[{"pool":"p","name":"gpu-0","requests":["r"],"uuid":"GPU-0","cdiDeviceIDs":["v/c=d"],"futureDeviceField":true}]}`
	b := envelopeWith(1, data)
	// Unknown envelope fields are ignored as well.
	b = append(b[:len(b)-1], `,"writer":"gpudra v9"}`...)

	got, cerr := decode(b)
	require.Nil(t, cerr)
	assert.Equal(t, &ClaimRecord{
		UID: "abc", Namespace: "ns", Name: "n", State: PrepareStarted, BootID: "b",
		Updated: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Devices: []Device{{Pool: "p", Name: "gpu-0", Requests: []string{"r"}, UUID: "GPU-0", CDIDeviceIDs: []string{"v/c=d"}}},
	}, got)
}

// A file written before optional fields existed decodes with zero values.
func TestDecodeOldRecordWithoutOptionalFields(t *testing.T) {
	data := `{"uid":"abc","state":"PrepareCompleted","devices":[{"name":"gpu-1","uuid":"GPU-1"}]}`
	got, cerr := decode(envelopeWith(1, data))
	require.Nil(t, cerr)
	assert.Equal(t, "abc", got.UID)
	require.Len(t, got.Devices, 1)
	assert.Empty(t, got.Devices[0].ShareID)
	assert.Nil(t, got.Devices[0].Config)
	assert.Nil(t, got.Devices[0].CDIDeviceIDs)
	assert.True(t, got.Updated.IsZero())
}

func TestDecodeNormalizesConfig(t *testing.T) {
	data := `{"uid":"abc","state":"PrepareStarted","devices":[{"name":"a","config":{ "x" : [1, 2] }},{"name":"b","config":null}]}`
	got, cerr := decode(envelopeWith(1, data))
	require.Nil(t, cerr)
	assert.Equal(t, `{"x":[1,2]}`, string(got.Devices[0].Config))
	assert.Nil(t, got.Devices[1].Config)
}

func TestDecodeRejectsDamage(t *testing.T) {
	valid, err := encode(sampleRecord("abc"))
	require.NoError(t, err)
	dataStart := strings.Index(string(valid), `"data":`) + len(`"data":`)
	flipped := append([]byte(nil), valid...)
	flipped[dataStart+10] ^= 0x01 // inside the data, still valid JSON-ish text

	goodData := `{"uid":"abc","state":"PrepareStarted"}`
	tests := []struct {
		name   string
		in     []byte
		reason string
	}{
		{"empty file", nil, "empty"},
		{"only whitespace", []byte(" \n\t"), "empty"},
		{"truncated", valid[:len(valid)/2], "truncated"},
		{"truncated at last byte", valid[:len(valid)-2], "truncated"},
		{"flipped byte in data", flipped, "checksum mismatch"},
		{"not JSON", []byte("hello"), "not valid JSON"},
		{"not an object", []byte(`[1,2]`), "not a checkpoint envelope"},
		{"trailing garbage", append(append([]byte(nil), valid...), "x"...), "not valid JSON"},
		{"wrong checksum", []byte(`{"version":1,"checksum":"sha256:` + strings.Repeat("00", 32) + `","data":` + goodData + `}`), "checksum mismatch"},
		{"missing checksum", []byte(`{"version":1,"data":` + goodData + `}`), `no "checksum" field`},
		{"other hash", []byte(`{"version":1,"checksum":"md5:00","data":` + goodData + `}`), `does not start with "sha256:"`},
		{"short checksum", []byte(`{"version":1,"checksum":"sha256:abcd","data":` + goodData + `}`), "64 hex digits"},
		{"unsupported version", envelopeWith(CurrentVersion+1, goodData), "format version 2"},
		{"version zero", envelopeWith(0, goodData), "invalid format version 0"},
		{"missing version", []byte(`{"checksum":"sha256:00","data":{}}`), `no "version" field`},
		{"version not a number", []byte(`{"version":"1","checksum":"sha256:00","data":{}}`), "not a checkpoint envelope"},
		{"missing data", []byte(`{"version":1,"checksum":"sha256:` + strings.Repeat("00", 32) + `"}`), `no "data" field`},
		{"data of wrong type", envelopeWith(1, `{"uid":"abc","state":"PrepareStarted","devices":{}}`), "does not match the record schema"},
		{"data is null", envelopeWith(1, `null`), "invalid claim UID"},
		{"bad UID in data", envelopeWith(1, `{"uid":"../etc","state":"PrepareStarted"}`), "invalid claim UID"},
		{"unknown state", envelopeWith(1, `{"uid":"abc","state":"Exploded"}`), `unknown state "Exploded"`},
		{"oversized", append(envelopeWith(1, goodData), make([]byte, maxRecordSize)...), "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, cerr := decode(tc.in)
			require.NotNil(t, cerr, "decode accepted damaged input")
			assert.Nil(t, rec)
			assert.Contains(t, cerr.Reason, tc.reason)
			cerr.Path = "/x/abc.json"
			assert.Contains(t, cerr.Error(), "/x/abc.json")
			assert.Contains(t, cerr.Error(), "Recovering a corrupted checkpoint")
		})
	}
}

func TestCorruptErrorUnwraps(t *testing.T) {
	_, cerr := decode([]byte("{bad"))
	require.NotNil(t, cerr)
	var syn *json.SyntaxError
	assert.True(t, errors.As(error(cerr), &syn))
}

// The committed v1 file pins the format: every future binary must read it.
func TestGoldenV1(t *testing.T) {
	rec := sampleRecord("7c9e6679-7425-40de-944b-e07fc1f90ae7")
	if *update {
		b, err := encode(rec)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenV1), 0o755))
		require.NoError(t, os.WriteFile(goldenV1, b, 0o644))
	}
	b, err := os.ReadFile(goldenV1)
	require.NoError(t, err)
	got, cerr := decode(b)
	require.Nil(t, cerr)
	assert.Equal(t, rec, got)
	// While CurrentVersion is 1, encoding must also be byte-identical.
	again, err := encode(rec)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(again), "encoding changed; if intended, run go test -update and review the diff")
}
