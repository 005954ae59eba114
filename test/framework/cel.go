package framework

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// StartSchemaOnly starts an API server with a provider's CRDs and no webhooks at all, so that
// nothing but the CRD schema (its CEL rules included) defaults or validates what is created. It
// first checks that kind and kind+"Template" carry the same rules, both on the spec and on the
// object that holds it (the object, and spec.template): each rule is written once, on a type
// both embed (bootstrap's nodeSpecRules, controlplane's embeddedConfigRules), and this makes
// sure the generated CRDs still give both kinds all of them.
func StartSchemaOnly(t testing.TB, provider, kind string, scheme *runtime.Scheme) *Environment {
	t.Helper()
	files, err := ProjectCRDFiles(provider)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := LoadCRDs(files...)
	if err != nil {
		t.Fatal(err)
	}
	specRules := map[string]apiextensionsv1.ValidationRules{}
	holderRules := map[string]apiextensionsv1.ValidationRules{}
	for _, crd := range crds {
		holder := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		if crd.Spec.Names.Kind == kind+"Template" {
			holder = holder.Properties["spec"].Properties["template"]
		}
		holderRules[crd.Spec.Names.Kind] = holder.XValidations
		specRules[crd.Spec.Names.Kind] = holder.Properties["spec"].XValidations
	}
	if len(specRules[kind]) == 0 || !equality.Semantic.DeepEqual(specRules[kind], specRules[kind+"Template"]) {
		t.Fatalf("the spec rules of %s and %sTemplate differ:\n%v\n%v", kind, kind, specRules[kind], specRules[kind+"Template"])
	}
	if !equality.Semantic.DeepEqual(holderRules[kind], holderRules[kind+"Template"]) {
		t.Fatalf("the rules of %s and of %sTemplate's spec.template differ:\n%v\n%v", kind, kind, holderRules[kind], holderRules[kind+"Template"])
	}
	env, err := Start(Options{CRDs: crds, Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if len(env.WebhookInstallOptions.MutatingWebhooks)+len(env.WebhookInstallOptions.ValidatingWebhooks) != 0 {
		t.Fatal("the schema-only API server has webhooks")
	}
	return env
}

// ExpectRefusedAt checks that each create was refused with a message naming its field path (the
// map's key) and saying want.
func ExpectRefusedAt(t testing.TB, want string, refusals map[string]error) {
	t.Helper()
	for path, err := range refusals {
		if err == nil {
			t.Errorf("accepted without webhooks (want %s refused)", path)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, path+": ") || !strings.Contains(msg, want) {
			t.Errorf("refusal does not name %s with %q:\n%v", path, want, msg)
		}
	}
}

// ExpectFieldError checks that errs has an error at path that says want: the webhook's own
// validation refuses what the schema refuses, in the same words.
func ExpectFieldError(t testing.TB, errs field.ErrorList, path, want string) {
	t.Helper()
	for _, e := range errs {
		if e.Field == path && strings.Contains(e.Error(), want) {
			return
		}
	}
	t.Errorf("the webhook's validation does not refuse %s with %q: %v", path, want, errs)
}
