package chart

import (
	"context"
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// CompilePolicy compiles a ValidatingAdmissionPolicy with the API server's
// policy code, as the API server would, so that tests evaluate the chart's
// policies without a cluster.
func CompilePolicy(t testing.TB, p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	withAuthz := cel.OptionalVariableDeclarations{HasAuthorizer: true}
	c, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	var vars []cel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	c.CompileAndStoreVariables(vars, withAuthz, environment.StoredExpressions)
	var matches []cel.ExpressionAccessor
	for i := range p.Spec.MatchConditions {
		matches = append(matches, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
	}
	var validations, messages []cel.ExpressionAccessor
	for _, v := range p.Spec.Validations {
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		var m cel.ExpressionAccessor
		if v.MessageExpression != "" {
			m = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
		messages = append(messages, m)
	}
	return validating.NewValidator(
		c.CompileCondition(validations, withAuthz, environment.StoredExpressions),
		matchconditions.NewMatcher(c.CompileCondition(matches, withAuthz, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name),
		c.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		c.CompileCondition(messages, cel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// Policy renders the chart with args and compiles its
// ValidatingAdmissionPolicy named name.
func Policy(t testing.TB, name string, args ...string) validating.Validator {
	t.Helper()
	for _, o := range OfKind(Render(t, args...), "ValidatingAdmissionPolicy") {
		meta, _ := o["metadata"].(map[string]any)
		if meta["name"] != name {
			continue
		}
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, p); err != nil {
			t.Fatal(err)
		}
		return CompilePolicy(t, p)
	}
	t.Fatalf("the chart renders no ValidatingAdmissionPolicy %s", name)
	return nil
}

// EvalWrite runs v on a write of obj (nil for a delete) over old (nil for a
// create) of the given resource by userName and returns whether it is
// admitted and the denials.
func EvalWrite(v validating.Validator, userName string, gvr schema.GroupVersionResource, kind string, obj, old runtime.Object) (bool, []string) {
	return EvalWriteAs(v, &user.DefaultInfo{Name: userName}, gvr, kind, obj, old)
}

// EvalWriteAs is EvalWrite by the user u (e.g. with the node name a
// pod-bound token carries in its extra).
func EvalWriteAs(v validating.Validator, u user.Info, gvr schema.GroupVersionResource, kind string, obj, old runtime.Object) (bool, []string) {
	return evalWrite(v, u, gvr, "", kind, obj, old)
}

// EvalSubresourceWrite is EvalWrite of a subresource (e.g. a pod's status).
func EvalSubresourceWrite(v validating.Validator, userName string, gvr schema.GroupVersionResource, subresource, kind string,
	obj, old runtime.Object) (bool, []string) {
	return evalWrite(v, &user.DefaultInfo{Name: userName}, gvr, subresource, kind, obj, old)
}

func evalWrite(v validating.Validator, u user.Info, gvr schema.GroupVersionResource, subresource, kind string,
	obj, old runtime.Object) (bool, []string) {
	op, opts, named := admission.Update, runtime.Object(&metav1.UpdateOptions{}), obj
	switch {
	case old == nil:
		op, opts = admission.Create, &metav1.CreateOptions{}
	case obj == nil:
		op, opts, named = admission.Delete, &metav1.DeleteOptions{}, old
	}
	m, _ := named.(metav1.Object)
	gvk := gvr.GroupVersion().WithKind(kind)
	attrs := admission.NewAttributesRecord(obj, old, gvk, m.GetNamespace(), m.GetName(), gvr, subresource, op, opts, false, u)
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk}
	if obj != nil {
		versioned.VersionedObject = admission.NewLazyObject(obj)
	}
	if old != nil {
		versioned.VersionedOldObject = admission.NewLazyObject(old)
	}
	res := v.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	var denials []string
	for _, d := range res.Decisions {
		if d.Action != validating.ActionAdmit {
			denials = append(denials, fmt.Sprintf("%s (%s): %s", d.Evaluation, d.Reason, d.Message))
		}
	}
	return len(denials) == 0, denials
}
