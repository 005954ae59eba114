// Package webhooks holds the admission webhooks of KairosConfig and KairosConfigTemplate:
// defaulting, validation whose every message names the field and the fix, and immutability
// once data exists.
package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/dryrun"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1beta2-kairosconfig,mutating=true,failurePolicy=fail,groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigs,versions=v1beta2,name=default.kairosconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1beta2-kairosconfig,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigs,versions=v1beta2,name=validation.kairosconfig.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// KairosConfig defaults and validates KairosConfigs.
type KairosConfig struct{}

var (
	_ admission.Defaulter[*bootstrapv1.KairosConfig] = &KairosConfig{}
	_ admission.Validator[*bootstrapv1.KairosConfig] = &KairosConfig{}
)

// SetupWebhookWithManager registers the webhook.
func (w *KairosConfig) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.KairosConfig{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills the spec defaults.
func (w *KairosConfig) Default(_ context.Context, c *bootstrapv1.KairosConfig) error {
	c.Spec.Default()
	return nil
}

// ValidateCreate validates a new KairosConfig.
func (w *KairosConfig) ValidateCreate(_ context.Context, c *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	return validateSpec(&c.Spec, field.NewPath("spec"), "KairosConfig", c.Name, nil)
}

// ValidateUpdate validates a change. Once the bootstrap data exists the spec is frozen, except
// for the fields that change in place: a node may already run with the data, and changing
// anything else would only make the object lie about that node.
//
// Cluster API's in-place updates (contract "BootstrapConfig: support for in-place changes",
// cluster-api v1.14 docs/book/src/developer/providers/contracts/bootstrap-config.md) write the
// desired KairosConfig of an updated Machine; the webhook "should allow changes to mutable
// fields", which the update extension applies to the node while this provider's controller
// leaves the data alone. inPlaceFields are those fields: spec.image (the node upgrades to it with
// kairos-agent). A version change in place is the Machine's spec.version; spec.kubernetesVersion
// of a KairosConfig stays frozen like every other field.
func (w *KairosConfig) ValidateUpdate(_ context.Context, oldC, newC *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	var errs field.ErrorList
	if dataCreated(oldC) {
		// Compare with defaults applied on both sides: a provider upgrade that introduces a
		// default must not make every existing object immutable-violating.
		oldSpec, newSpec := oldC.Spec.DeepCopy(), newC.Spec.DeepCopy()
		oldSpec.Default()
		newSpec.Default()
		secretName := oldC.Status.DataSecretName
		if secretName == "" {
			secretName = oldC.Name // the data Secret is named after its KairosConfig
		}
		for _, f := range changedSpecFields(oldSpec, newSpec) {
			p := field.NewPath("spec")
			if f != "" {
				p = p.Child(f)
			}
			errs = append(errs, field.Forbidden(p, fmt.Sprintf(
				"is immutable once the bootstrap data exists (Secret %s): the node may already use it; only %s change in place; "+
					"create a new KairosConfig for a new Machine instead (templates roll Machines for you)", secretName, inPlaceFieldList())))
		}
	}
	return validateSpec(&newC.Spec, field.NewPath("spec"), "KairosConfig", newC.Name, errs)
}

// inPlaceFields are the KairosConfigSpec fields (JSON names) that may change once the bootstrap
// data exists.
var inPlaceFields = []string{"image"}

func inPlaceFieldList() string {
	out := make([]string, len(inPlaceFields))
	for i, f := range inPlaceFields {
		out[i] = "spec." + f
	}
	return strings.Join(out, ", ")
}

// changedSpecFields returns the top-level fields (JSON names, sorted) that differ between two
// defaulted specs, leaving out inPlaceFields.
func changedSpecFields(a, b *bootstrapv1.KairosConfigSpec) []string {
	if equality.Semantic.DeepEqual(a, b) {
		return nil
	}
	am, bm := specFields(a), specFields(b)
	var out []string
	for k := range am {
		if _, ok := bm[k]; !ok {
			bm[k] = nil
		}
	}
	for k, bv := range bm {
		if slices.Contains(inPlaceFields, k) {
			continue
		}
		if !reflect.DeepEqual(am[k], bv) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	if len(out) == 0 && !equality.Semantic.DeepEqual(withoutInPlace(a), withoutInPlace(b)) {
		out = []string{""} // not visible in JSON (cannot happen with the current types): refuse the whole spec
	}
	return out
}

func withoutInPlace(s *bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfigSpec {
	c := s.DeepCopy()
	c.Image = ""
	return c
}

func specFields(s *bootstrapv1.KairosConfigSpec) map[string]any {
	m := map[string]any{}
	raw, err := json.Marshal(s)
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return map[string]any{"": err.Error()}
	}
	return m
}

// ValidateDelete allows every deletion.
func (w *KairosConfig) ValidateDelete(context.Context, *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	return nil, nil
}

func dataCreated(c *bootstrapv1.KairosConfig) bool {
	return ptr.Deref(c.Status.Initialization.DataSecretCreated, false) || c.Status.DataSecretName != ""
}

// validateSpec runs the KairosConfigSpec validation both providers share plus a dry render,
// and wraps the result in the Invalid error the API server returns to the user.
func validateSpec(spec *bootstrapv1.KairosConfigSpec, fld *field.Path, kind, name string, errs field.ErrorList) (admission.Warnings, error) {
	defaulted := spec.DeepCopy()
	defaulted.Default()
	errs = append(errs, validation.ValidateKairosConfigSpec(defaulted, fld)...)
	if len(errs) == 0 {
		errs = append(errs, dryrun.Render(defaulted, fld)...)
	}
	warnings := validation.KairosConfigSpecWarnings(defaulted, fld)
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(bootstrapv1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
