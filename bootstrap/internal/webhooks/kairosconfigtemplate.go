package webhooks

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"sigs.k8s.io/cluster-api/util/topology"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-bootstrap-cluster-x-k8s-io-v1beta2-kairosconfigtemplate,mutating=true,failurePolicy=fail,groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigtemplates,versions=v1beta2,name=default.kairosconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-bootstrap-cluster-x-k8s-io-v1beta2-kairosconfigtemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigtemplates,versions=v1beta2,name=validation.kairosconfigtemplate.bootstrap.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// KairosConfigTemplate defaults and validates KairosConfigTemplates.
type KairosConfigTemplate struct{}

var (
	_ admission.Defaulter[*bootstrapv1.KairosConfigTemplate] = &KairosConfigTemplate{}
	_ admission.Validator[*bootstrapv1.KairosConfigTemplate] = &KairosConfigTemplate{}
)

// SetupWebhookWithManager registers the webhook.
func (w *KairosConfigTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bootstrapv1.KairosConfigTemplate{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills the spec defaults of the template.
func (w *KairosConfigTemplate) Default(_ context.Context, t *bootstrapv1.KairosConfigTemplate) error {
	t.Spec.Template.Spec.Default()
	return nil
}

// ValidateCreate validates a new template.
func (w *KairosConfigTemplate) ValidateCreate(_ context.Context, t *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	return validateTemplate(t, nil)
}

// ValidateUpdate keeps templates immutable, as Cluster API expects of templates: Machines
// created from a template are not rolled when it changes in place, so a change would only
// make later Machines differ silently from earlier ones. The topology controller's
// server-side-apply dry runs are let through: they compute diffs, they never persist.
func (w *KairosConfigTemplate) ValidateUpdate(ctx context.Context, oldT, newT *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	var errs field.ErrorList
	if !topology.IsDryRunRequest(req, newT) {
		oldSpec, newSpec := oldT.Spec.Template.Spec.DeepCopy(), newT.Spec.Template.Spec.DeepCopy()
		oldSpec.Default()
		newSpec.Default()
		if !equality.Semantic.DeepEqual(oldSpec, newSpec) {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "template", "spec"),
				"KairosConfigTemplate spec is immutable: create a new template and point the MachineDeployment, MachinePool or KairosControlPlane at it to roll Machines"))
		}
	}
	return validateTemplate(newT, errs)
}

// ValidateDelete allows every deletion.
func (w *KairosConfigTemplate) ValidateDelete(context.Context, *bootstrapv1.KairosConfigTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validateTemplate(t *bootstrapv1.KairosConfigTemplate, errs field.ErrorList) (admission.Warnings, error) {
	fld := field.NewPath("spec", "template", "spec")
	errs = append(errs, t.Spec.Template.ObjectMeta.Validate(field.NewPath("spec", "template", "metadata"))...)
	// Many Machines share a template's spec: no literal hostname.
	errs = append(errs, validation.ValidateSharedKairosConfigSpec(&t.Spec.Template.Spec, fld)...)
	return validateSpec(&t.Spec.Template.Spec, fld, "KairosConfigTemplate", t.Name, errs)
}
