package v1alpha1

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const header = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters"`

func timeSliced(i TimeSliceInterval) *GpuClaimParameters {
	p := DefaultGpuClaimParameters()
	p.Sharing = &GpuSharing{Strategy: TimeSlicingStrategy, TimeSlicing: &TimeSlicingConfig{Interval: i}}
	return p
}

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *GpuClaimParameters
	}{
		{
			name: "minimal JSON is defaulted to exclusive",
			in:   header + `}`,
			want: DefaultGpuClaimParameters(),
		},
		{
			name: "minimal YAML",
			in:   "apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\n",
			want: DefaultGpuClaimParameters(),
		},
		{
			name: "YAML with time slicing",
			in: `
apiVersion: resource.gpudra.io/v1alpha1
kind: GpuClaimParameters
sharing:
  strategy: TimeSlicing        # Exclusive (default) | TimeSlicing
  timeSlicing:
    interval: Short
`,
			want: timeSliced(ShortTimeSlice),
		},
		{
			name: "time slicing without settings gets the default interval",
			in:   header + `,"sharing":{"strategy":"TimeSlicing"}}`,
			want: timeSliced(DefaultTimeSlice),
		},
		{
			name: "explicit exclusive",
			in:   header + `,"sharing":{"strategy":"Exclusive"}}`,
			want: DefaultGpuClaimParameters(),
		},
		{
			name: "JSON with surrounding white space",
			in:   "\n  " + header + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}` + "\n",
			want: timeSliced(LongTimeSlice),
		},
		{
			name: "YAML flow style",
			in:   `{apiVersion: resource.gpudra.io/v1alpha1, kind: GpuClaimParameters, sharing: {strategy: TimeSlicing}}`,
			want: timeSliced(DefaultTimeSlice),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want is the exact message of the error.
		want string
		// fields, when set, are the paths of the field errors in DecodeError.Errs.
		fields []string
		// strict says whether the cause is a strict decoding error.
		strict bool
	}{
		{
			name:   "unknown nested field",
			in:     header + `,"sharing":{"stratgy":"TimeSlicing"}}`,
			want:   `invalid GpuClaimParameters: strict decoding error: unknown field "sharing.stratgy"`,
			strict: true,
		},
		{
			name: "unknown fields at several levels",
			in: "apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\nmetadata: {}\n" +
				"sharing:\n  strategy: TimeSlicing\n  timeSlicing:\n    intervall: Long\n",
			want: `invalid GpuClaimParameters: strict decoding error: unknown field "metadata", ` +
				`unknown field "sharing.timeSlicing.intervall"`,
			strict: true,
		},
		{
			name:   "field names are case sensitive",
			in:     header + `,"Sharing":{"strategy":"TimeSlicing"}}`,
			want:   `invalid GpuClaimParameters: strict decoding error: unknown field "Sharing"`,
			strict: true,
		},
		{
			name:   "unknown mps setting",
			in:     header + `,"sharing":{"strategy":"MPS","mps":{"threads":50}}}`,
			want:   `invalid GpuClaimParameters: strict decoding error: unknown field "sharing.mps.threads"`,
			strict: true,
		},
		{
			name:   "duplicate JSON key",
			in:     header + `,"sharing":{"strategy":"Exclusive","strategy":"TimeSlicing"}}`,
			want:   `invalid GpuClaimParameters: strict decoding error: duplicate field "sharing.strategy"`,
			strict: true,
		},
		{
			name: "duplicate YAML key",
			in:   "apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\nkind: GpuClaimParameters\n",
			want: `invalid GpuClaimParameters: cannot parse parameters as JSON or YAML: ` +
				`yaml: unmarshal errors: line 3: key "kind" already set in map`,
		},
		{
			name:   "wrong kind",
			in:     `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParams"}`,
			want:   `invalid GpuClaimParameters: kind: Unsupported value: "GpuClaimParams": supported values: "GpuClaimParameters"`,
			fields: []string{"kind"},
		},
		{
			name:   "missing kind",
			in:     `{"apiVersion":"resource.gpudra.io/v1alpha1"}`,
			want:   `invalid GpuClaimParameters: kind: Required value: must be "GpuClaimParameters"`,
			fields: []string{"kind"},
		},
		{
			name: "wrong apiVersion",
			in:   "apiVersion: resource.gpudra.io/v1beta1\nkind: GpuClaimParameters\n",
			want: `invalid GpuClaimParameters: apiVersion: Unsupported value: "resource.gpudra.io/v1beta1": ` +
				`supported values: "resource.gpudra.io/v1alpha1"`,
			fields: []string{"apiVersion"},
		},
		{
			name:   "missing apiVersion",
			in:     `{"kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing"}}`,
			want:   `invalid GpuClaimParameters: apiVersion: Required value: must be "resource.gpudra.io/v1alpha1"`,
			fields: []string{"apiVersion"},
		},
		{
			name: "another type altogether is named before its fields",
			in:   `{"apiVersion":"v1","kind":"ConfigMap","data":{}}`,
			want: `invalid GpuClaimParameters: [apiVersion: Unsupported value: "v1": supported values: ` +
				`"resource.gpudra.io/v1alpha1", kind: Unsupported value: "ConfigMap": supported values: "GpuClaimParameters"]`,
			fields: []string{"apiVersion", "kind"},
		},
		{
			name:   "MPS settings with another strategy",
			in:     header + `,"sharing":{"strategy":"Exclusive","mps":{}}}`,
			want:   `invalid GpuClaimParameters: sharing.mps: Invalid value: "{...}": mps may only be set when strategy is MPS`,
			fields: []string{"sharing.mps"},
		},
		{
			name: "MPS limits out of range",
			in: header + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":0,` +
				`"defaultPinnedDeviceMemoryLimit":"1Ki","perDevicePinnedMemoryLimits":{"01":"1Gi"}}}}`,
			want: `invalid GpuClaimParameters: [sharing.mps.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100 ` +
				`(percent of the GPU's multiprocessors per client), sharing.mps.defaultPinnedDeviceMemoryLimit: Invalid value: "1Ki": ` +
				`must be at least 1Mi (MPS limits are whole MiB), sharing.mps.perDevicePinnedMemoryLimits[01]: Invalid value: "01": ` +
				`must be a CUDA device ordinal between 0 and 127, as the container sees its GPUs, or the UUID of one of the request's devices (GPU-… or MIG-…)]`,
			fields: []string{"sharing.mps.defaultActiveThreadPercentage", "sharing.mps.defaultPinnedDeviceMemoryLimit",
				"sharing.mps.perDevicePinnedMemoryLimits[01]"},
		},
		{
			name: "unknown strategy",
			in:   header + `,"sharing":{"strategy":"timeslicing"}}`,
			want: `invalid GpuClaimParameters: sharing.strategy: Unsupported value: "timeslicing": ` +
				`supported values: "Exclusive", "TimeSlicing", "MPS"`,
			fields: []string{"sharing.strategy"},
		},
		{
			name: "time slicing settings without the strategy",
			in:   "apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\nsharing:\n  timeSlicing:\n    interval: Long\n",
			want: `invalid GpuClaimParameters: sharing.timeSlicing: Invalid value: {"interval":"Long"}: ` +
				`timeSlicing may only be set when strategy is TimeSlicing`,
			fields: []string{"sharing.timeSlicing"},
		},
		{
			name: "bad interval",
			in:   header + `,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Longest"}}}`,
			want: `invalid GpuClaimParameters: sharing.timeSlicing.interval: Unsupported value: "Longest": ` +
				`supported values: "Default", "Short", "Medium", "Long"`,
			fields: []string{"sharing.timeSlicing.interval"},
		},
		{
			name: "all validation errors are listed",
			in:   header + `,"sharing":{"strategy":"Shared","timeSlicing":{"interval":"Long"}}}`,
			want: `invalid GpuClaimParameters: [sharing.strategy: Unsupported value: "Shared": supported values: ` +
				`"Exclusive", "TimeSlicing", "MPS", sharing.timeSlicing: Invalid value: {"interval":"Long"}: ` +
				`timeSlicing may only be set when strategy is TimeSlicing]`,
			fields: []string{"sharing.strategy", "sharing.timeSlicing"},
		},
		{
			name: "wrong value type",
			in:   header + `,"sharing":{"strategy":3}}`,
			want: `invalid GpuClaimParameters: json: cannot unmarshal number into Go struct field ` +
				`GpuSharing.sharing.strategy of type v1alpha1.GpuSharingStrategy`,
		},
		{
			name: "empty",
			in:   " \n",
			want: `invalid GpuClaimParameters: parameters are empty; expected an object with ` +
				`apiVersion "resource.gpudra.io/v1alpha1" and kind "GpuClaimParameters"`,
		},
		{
			name: "not an object",
			in:   "- strategy: TimeSlicing\n",
			want: `invalid GpuClaimParameters: parameters must be an object with ` +
				`apiVersion "resource.gpudra.io/v1alpha1" and kind "GpuClaimParameters", not a list`,
		},
		{
			name: "syntax error",
			in:   header + `,"sharing":{`,
			want: `invalid GpuClaimParameters: cannot parse parameters as JSON or YAML: ` +
				`yaml: line 1: did not find expected node content`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Equal(t, tt.want, err.Error())

			var de *DecodeError
			require.ErrorAs(t, err, &de)
			var fields []string
			for _, fe := range de.Errs {
				fields = append(fields, fe.Field)
			}
			assert.Equal(t, tt.fields, fields)
			assert.Equal(t, tt.strict, runtime.IsStrictDecodingError(errors.Unwrap(err)))
			assert.Equal(t, len(tt.fields) == 0, de.Err != nil, "exactly one of Err and Errs is set")
		})
	}
}

func TestDecodeSizeLimit(t *testing.T) {
	base := header + `}`
	pad := func(n int) []byte { return []byte(base + strings.Repeat(" ", n-len(base))) }

	_, err := Decode(pad(MaxParametersSize))
	require.NoError(t, err, "exactly the limit is accepted")

	_, err = Decode(pad(MaxParametersSize + 1))
	require.Error(t, err)
	assert.Equal(t, "invalid GpuClaimParameters: parameters are 10241 bytes, more than the 10240 bytes (10 KiB) "+
		"allowed for opaque device configuration", err.Error())
	var de *DecodeError
	assert.ErrorAs(t, err, &de)
}

func TestDecodeErrorUnwrapsFieldErrors(t *testing.T) {
	_, err := Decode([]byte(header + `,"sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":101}}}`))
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	require.Len(t, de.Errs, 1)
	assert.Equal(t, field.ErrorTypeInvalid, de.Errs[0].Type)
	assert.Equal(t, int32(101), de.Errs[0].BadValue)
	assert.Equal(t, de.Errs.ToAggregate().Error(), errors.Unwrap(err).Error())
}

func TestEncode(t *testing.T) {
	p := timeSliced(MediumTimeSlice)
	p.APIVersion, p.Kind = "", ""

	data, err := Encode(p)
	require.NoError(t, err)
	assert.JSONEq(t, header+`,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Medium"}}}`, string(data))
	assert.Empty(t, p.Kind, "Encode does not modify its argument")

	back, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, timeSliced(MediumTimeSlice), back)

	data, err = Encode(DefaultGpuClaimParameters())
	require.NoError(t, err)
	assert.JSONEq(t, header+`,"sharing":{"strategy":"Exclusive"}}`, string(data))

	_, err = Encode(nil)
	assert.EqualError(t, err, "cannot encode a nil GpuClaimParameters")
}
