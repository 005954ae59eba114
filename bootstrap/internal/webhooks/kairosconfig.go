// Package webhooks holds the admission webhooks of KairosConfig and KairosConfigTemplate:
// defaulting, validation whose every message names the field and the fix, and immutability
// once data exists.
package webhooks

import (
	"context"
	"fmt"

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

// ValidateUpdate validates a change. Once the bootstrap data exists the spec is frozen: a node
// may already run with it, and changing the object would only make it lie about that node.
func (w *KairosConfig) ValidateUpdate(_ context.Context, oldC, newC *bootstrapv1.KairosConfig) (admission.Warnings, error) {
	var errs field.ErrorList
	if dataCreated(oldC) {
		// Compare with defaults applied on both sides: a provider upgrade that introduces a
		// default must not make every existing object immutable-violating.
		oldSpec, newSpec := oldC.Spec.DeepCopy(), newC.Spec.DeepCopy()
		oldSpec.Default()
		newSpec.Default()
		if !equality.Semantic.DeepEqual(oldSpec, newSpec) {
			secretName := oldC.Status.DataSecretName
			if secretName == "" {
				secretName = oldC.Name // the data Secret is named after its KairosConfig
			}
			errs = append(errs, field.Forbidden(field.NewPath("spec"), fmt.Sprintf(
				"is immutable once the bootstrap data exists (Secret %s): the node may already use it; "+
					"create a new KairosConfig for a new Machine instead (templates roll Machines for you)", secretName)))
		}
	}
	return validateSpec(&newC.Spec, field.NewPath("spec"), "KairosConfig", newC.Name, errs)
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
