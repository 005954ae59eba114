package framework

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

// Defaulter is a spec type of our APIs with its own defaulting (bootstrapv1.KairosConfigSpec,
// controlplanev1.KairosControlPlaneSpec, controlplanev1.KairosControlPlaneTemplateResourceSpec).
type Defaulter[T any] interface {
	*T
	Default()
	DeepCopy() *T
}

// ExpectDefaulted fails the test unless got, a spec as the API server returned it after
// admission, equals sent, the spec as the client sent it, with the API's own Default() applied
// locally. Our defaulting webhooks call Default() and nothing else, and the CRDs declare no
// schema defaults, so the two must be equal. The values Default() fills are the API's unit
// tests'; this checks that admission applies exactly them. It also fails when Default() changes
// nothing in sent: an object without defaulting webhooks would pass then.
func ExpectDefaulted[T any, P Defaulter[T]](t testing.TB, what string, sent, got T) {
	t.Helper()
	want := P(&sent).DeepCopy()
	P(want).Default()
	if equality.Semantic.DeepEqual(sent, *want) {
		t.Errorf("%s: Default() changes nothing in the spec sent, so admission's defaulting is not checked", what)
	}
	if !equality.Semantic.DeepEqual(*want, got) {
		t.Errorf("%s after admission is not the spec sent with Default() applied (-want +got):\n%s", what, diff.Diff(*want, got))
	}
}
