package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// DecodeError is the error Decode returns for every input it rejects. Use
// errors.As to get at it.
//
// +k8s:deepcopy-gen=false
type DecodeError struct {
	// Kind is the kind that was to be decoded; empty for
	// GpuClaimParameters.
	Kind string
	// Errs lists the field-level problems: a missing or wrong apiVersion or
	// kind, and values that fail validation. It is empty when Err is set.
	Errs field.ErrorList
	// Err is the reason the input could not be read as an object of the
	// kind at all: too large, not JSON or YAML, not an object, unknown or
	// duplicate fields (a strict decoding error, see
	// runtime.IsStrictDecodingError), or a value of the wrong type.
	Err error
}

// Error tells what is wrong with the input, listing every problem.
func (e *DecodeError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = Kind
	}
	prefix := "invalid " + kind + ": "
	if e.Err != nil {
		return prefix + e.Err.Error()
	}
	if agg := e.Errs.ToAggregate(); agg != nil {
		return prefix + agg.Error()
	}
	return prefix + "unknown problem"
}

// Unwrap returns Err, or the aggregate of Errs.
func (e *DecodeError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	if agg := e.Errs.ToAggregate(); agg != nil {
		return agg
	}
	return nil
}

var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(AddToScheme(s))
		return s
	}()
	// strictJSON rejects unknown and duplicate fields and reports them by
	// their full path, e.g. unknown field "sharing.stratgy".
	strictJSON = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory,
		scheme, scheme, serializerjson.SerializerOptions{Strict: true})
)

// Decode reads opaque parameters given as JSON or YAML. It requires apiVersion
// resource.gpudra.io/v1alpha1 and kind GpuClaimParameters, rejects unknown and
// duplicate fields and inputs larger than MaxParametersSize, then applies
// SetDefaults and Validate. The returned object is defaulted and valid; every
// error is a *DecodeError.
func Decode(raw []byte) (*GpuClaimParameters, error) {
	if len(raw) > MaxParametersSize {
		return nil, &DecodeError{Err: fmt.Errorf(
			"parameters are %d bytes, more than the %d bytes (10 KiB) allowed for opaque device configuration",
			len(raw), MaxParametersSize)}
	}
	data, err := toJSONObject(raw, "parameters", Kind)
	if err != nil {
		return nil, &DecodeError{Err: err}
	}
	if errs := checkTypeMeta(data, Kind); len(errs) > 0 {
		return nil, &DecodeError{Errs: errs}
	}

	p := &GpuClaimParameters{}
	if _, _, err := strictJSON.Decode(data, nil, p); err != nil {
		return nil, &DecodeError{Err: err}
	}
	SetDefaults(p)
	if errs := Validate(p); len(errs) > 0 {
		return nil, &DecodeError{Errs: errs}
	}
	return p, nil
}

// toJSONObject returns raw as JSON, converting it from YAML unless it already
// is JSON, and makes sure it is a single object; what names the input in
// errors ("parameters"), kind the kind expected.
func toJSONObject(raw []byte, what, kind string) ([]byte, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s are empty; expected an object with apiVersion %q and kind %q",
			what, APIVersion, kind)
	}
	data := trimmed
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		// YAML is a superset of JSON, so invalid JSON gets its error here.
		// The strict conversion rejects duplicate keys.
		converted, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, fmt.Errorf("cannot parse %s as JSON or YAML: %s", what, oneLine(err.Error()))
		}
		data = bytes.TrimSpace(converted)
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%s must be an object with apiVersion %q and kind %q, not %s",
			what, APIVersion, kind, describeJSON(data))
	}
	return data, nil
}

// oneLine joins the lines of a multi-line parser message, such as the YAML
// decoder's list of errors, so that it reads well in events and logs.
func oneLine(msg string) string {
	lines := strings.Split(msg, "\n")
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}

// describeJSON names the type of a JSON value that is not an object.
func describeJSON(data []byte) string {
	if len(data) == 0 {
		return "nothing"
	}
	switch data[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// checkTypeMeta reports a missing or unexpected apiVersion or kind (kind is
// the one expected), so that a wrong type is named before any unknown fields
// it brings along.
func checkTypeMeta(data []byte, kind string) field.ErrorList {
	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.Unmarshal(data, &tm); err != nil {
		// Cannot happen for a JSON object; the strict decoding that
		// follows reports whatever is wrong.
		return nil
	}
	var errs field.ErrorList
	errs = append(errs, checkTypeMetaField(field.NewPath("apiVersion"), tm.APIVersion, APIVersion)...)
	errs = append(errs, checkTypeMetaField(field.NewPath("kind"), tm.Kind, kind)...)
	return errs
}

func checkTypeMetaField(path *field.Path, got any, want string) field.ErrorList {
	if got == nil || got == "" {
		return field.ErrorList{field.Required(path, fmt.Sprintf("must be %q", want))}
	}
	if got != want {
		return field.ErrorList{field.NotSupported(path, got, []string{want})}
	}
	return nil
}

// Encode returns p as JSON with apiVersion and kind set, as Decode accepts
// it. p itself is not modified and is encoded as is, without defaulting.
func Encode(p *GpuClaimParameters) ([]byte, error) {
	if p == nil {
		return nil, errors.New("cannot encode a nil " + Kind)
	}
	c := p.DeepCopy()
	c.APIVersion = APIVersion
	c.Kind = Kind
	return json.Marshal(c)
}
