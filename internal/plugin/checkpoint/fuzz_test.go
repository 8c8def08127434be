package checkpoint

import (
	"reflect"
	"testing"
)

// FuzzDecode checks that the decoder never panics, and that whatever it
// accepts encodes and decodes back to an equal record. Each input is tried
// as a whole file and, since random bytes almost never carry a valid
// checksum, also as the "data" of a correctly checksummed envelope.
func FuzzDecode(f *testing.F) {
	if b, err := encode(sampleRecord("7c9e6679-7425-40de-944b-e07fc1f90ae7")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"uid":"a","state":"UnprepareStarted","devices":null,"extra":[{}]}`))
	f.Add([]byte(`{"uid":"a","state":"PrepareStarted","updated":"2025-01-02T03:04:05+05:30","devices":[{"config":{ "a" : "<\u00e9>" }}]}`))
	f.Add([]byte(`{"version":1}`))

	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, in)
		checkDecode(t, envelopeWith(CurrentVersion, string(in)))
	})
}

func checkDecode(t *testing.T, in []byte) {
	rec, cerr := decode(in)
	if cerr != nil {
		if rec != nil {
			t.Fatalf("decode returned both a record and an error: %v", cerr)
		}
		if cerr.Reason == "" {
			t.Fatal("corrupt error without a reason")
		}
		return
	}
	out, err := encode(rec)
	if err != nil {
		t.Fatalf("accepted record does not encode: %v\nrecord: %+v", err, rec)
	}
	again, cerr := decode(out)
	if cerr != nil {
		t.Fatalf("re-encoded record does not decode: %v\nencoded: %s", cerr, out)
	}
	if !again.Updated.Equal(rec.Updated) {
		t.Fatalf("updated time changed: %v -> %v", rec.Updated, again.Updated)
	}
	// The time's location may be a distinct but equivalent *time.Location;
	// compare everything else exactly.
	again.Updated = rec.Updated
	if !reflect.DeepEqual(rec, again) {
		t.Fatalf("round trip changed the record:\nbefore: %+v\nafter:  %+v", rec, again)
	}
	if out2, err := encode(again); err != nil || string(out2) != string(out) {
		t.Fatalf("encoding is not stable (err %v):\n%s\n%s", err, out, out2)
	}
}
