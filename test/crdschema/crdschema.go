// Package crdschema checks CustomResourceDefinitions with the API server's
// own code (k8s.io/apiextensions-apiserver), for unit tests that must know
// whether a CRD of the chart would be accepted and what its schema admits,
// without a cluster: Load validates the CRD as the API server does when it
// is created (structural schema, defaults, CEL rules and their estimated
// cost), and Schema.Admit runs an object through what the API server does
// with a custom resource before storing it (pruning, defaulting, OpenAPI
// validation, list invariants, CEL rules, transition rules on update).
//
// Only tests import it; no program links it.
package crdschema

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// Load reads one CRD (YAML or JSON) from path and validates it as the API
// server validates a CRD it is asked to create.
func Load(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	return Parse(data)
}

// Parse is Load for a CRD already read.
func Parse(data []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("decode CRD: %w", err)
	}
	internal, err := toInternal(crd)
	if err != nil {
		return nil, err
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		return nil, fmt.Errorf("the API server would refuse CRD %s: %w", crd.Name, errs.ToAggregate())
	}
	return crd, nil
}

func toInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := apiextensions.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	c := crd.DeepCopy()
	s.Default(c)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := s.Convert(c, internal, nil); err != nil {
		return nil, fmt.Errorf("convert CRD %s: %w", crd.Name, err)
	}
	return internal, nil
}

// Schema is the schema of one served version of a CRD.
type Schema struct {
	// Props is the version's OpenAPI schema as written.
	Props *apiextensionsv1.JSONSchemaProps

	structural *structuralschema.Structural
	validator  crvalidation.SchemaValidator
	cel        *cel.Validator
}

// SchemaOf returns the schema of the CRD's version.
func SchemaOf(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Schema, error) {
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version })
	if i < 0 || crd.Spec.Versions[i].Schema == nil || crd.Spec.Versions[i].Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("CRD %s has no schema for version %s", crd.Name, version)
	}
	props := crd.Spec.Versions[i].Schema.OpenAPIV3Schema
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, fmt.Errorf("convert the schema of %s %s: %w", crd.Name, version, err)
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("structural schema of %s %s: %w", crd.Name, version, err)
	}
	validator, _, err := crvalidation.NewSchemaValidator(internal)
	if err != nil {
		return nil, fmt.Errorf("schema validator of %s %s: %w", crd.Name, version, err)
	}
	return &Schema{Props: props, structural: structural, validator: validator,
		cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// Admit runs obj (a decoded JSON object; on update with the stored old one)
// through the API server's handling of a custom resource: fields the schema
// does not know are errors (as with kubectl's default strict field
// validation), defaults are applied to obj in place, then the OpenAPI
// schema, list-map invariants and CEL rules are checked. It returns every
// problem.
func (s *Schema) Admit(obj, old map[string]any) field.ErrorList {
	var errs field.ErrorList
	unknown := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range unknown {
		errs = append(errs, field.Forbidden(field.NewPath(p), "unknown field: the schema does not declare it"))
	}
	defaulting.Default(obj, s.structural)
	if old != nil {
		errs = append(errs, crvalidation.ValidateCustomResourceUpdate(nil, obj, old, s.validator)...)
	} else {
		errs = append(errs, crvalidation.ValidateCustomResource(nil, obj, s.validator)...)
	}
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if len(errs) > 0 {
		// The API server evaluates CEL rules only on objects of the
		// right shape.
		return errs
	}
	var oldObj any
	if old != nil {
		oldObj = old
	}
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, oldObj, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// CompareFields walks the Go type t (a struct whose JSON encoding the
// schema describes) beside the schema and returns every difference: a field
// one of them has and the other lacks, or a JSON type that differs. A
// metav1.ObjectMeta or metav1.ListMeta field is only checked to be an
// object. The result is sorted; nil when they agree.
func (s *Schema) CompareFields(t reflect.Type) []string {
	var diffs []string
	compare(t, s.Props, "", &diffs)
	slices.Sort(diffs)
	return diffs
}

func compare(t reflect.Type, props *apiextensionsv1.JSONSchemaProps, path string, diffs *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	where := path
	if where == "" {
		where = "<root>"
	}
	want := jsonType(t)
	if props.Type != want {
		*diffs = append(*diffs, fmt.Sprintf("%s: Go type %s is a JSON %s, the schema says %q", where, t, want, props.Type))
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		if props.Items == nil || props.Items.Schema == nil {
			*diffs = append(*diffs, where+": the schema has no items")
			return
		}
		compare(t.Elem(), props.Items.Schema, path+"[]", diffs)
	case reflect.Struct:
		if t.PkgPath() == "k8s.io/apimachinery/pkg/apis/meta/v1" {
			return // metadata: type object, as every CRD declares it
		}
		goFields := map[string]reflect.Type{}
		collectFields(t, goFields)
		for name, ft := range goFields {
			sub, ok := props.Properties[name]
			if !ok {
				*diffs = append(*diffs, fmt.Sprintf("%s: Go field %q is not in the schema", where, name))
				continue
			}
			compare(ft, &sub, strings.TrimPrefix(path+"."+name, "."), diffs)
		}
		for name := range props.Properties {
			if _, ok := goFields[name]; !ok {
				*diffs = append(*diffs, fmt.Sprintf("%s: schema property %q has no Go field", where, name))
			}
		}
	}
}

// collectFields adds the JSON fields of struct t, inlined ones included.
func collectFields(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue // encoding/json promotes the fields of embedded unexported structs
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(","+opts+",", ",inline,")) {
			collectFields(f.Type, into)
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = f.Type
	}
}

// jsonType is the JSON schema type of a Go type's encoding.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	default:
		return t.String()
	}
}

// Enum returns the enum of the property at path (names joined by dots,
// "[]" for the items of a list), as strings.
func (s *Schema) Enum(path string) ([]string, error) {
	p, err := s.Property(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range p.Enum {
		var str string
		if err := yaml.Unmarshal(v.Raw, &str); err != nil {
			return nil, fmt.Errorf("%s: enum value %s: %w", path, v.Raw, err)
		}
		out = append(out, str)
	}
	return out, nil
}

// Property returns the schema of the property at path.
func (s *Schema) Property(path string) (*apiextensionsv1.JSONSchemaProps, error) {
	p := s.Props
	for part := range strings.SplitSeq(path, ".") {
		name, items := strings.CutSuffix(part, "[]")
		sub, ok := p.Properties[name]
		if !ok {
			return nil, fmt.Errorf("no property %q at %s", name, path)
		}
		p = &sub
		if items {
			if p.Items == nil || p.Items.Schema == nil {
				return nil, errors.New(path + ": not a list with a schema")
			}
			p = p.Items.Schema
		}
	}
	return p, nil
}
