// Package webhooks holds the admission webhooks of KairosControlPlane and
// KairosControlPlaneTemplate: defaulting, and validation whose messages name the field and the
// fix.
package webhooks

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"sigs.k8s.io/cluster-api/util/topology"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/dryrun"
	kcvalidation "github.com/kairos-capi/kairos-capi/common/provider/validation"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
	"github.com/kairos-capi/kairos-capi/controlplane/validation"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplane,mutating=true,failurePolicy=fail,groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanes,versions=v1beta2,name=default.kairoscontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplane,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanes,versions=v1beta2,name=validation.kairoscontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// KairosControlPlane defaults and validates KairosControlPlanes.
type KairosControlPlane struct{}

var (
	_ admission.Defaulter[*controlplanev1.KairosControlPlane] = &KairosControlPlane{}
	_ admission.Validator[*controlplanev1.KairosControlPlane] = &KairosControlPlane{}
)

// SetupWebhookWithManager registers the webhook.
func (w *KairosControlPlane) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &controlplanev1.KairosControlPlane{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default fills the defaults.
func (w *KairosControlPlane) Default(_ context.Context, c *controlplanev1.KairosControlPlane) error {
	c.Spec.Default()
	return nil
}

// ValidateCreate validates a new control plane.
func (w *KairosControlPlane) ValidateCreate(_ context.Context, c *controlplanev1.KairosControlPlane) (admission.Warnings, error) {
	spec := defaulted(c)
	errs := validation.ValidateKairosControlPlaneSpec(spec, field.NewPath("spec"))
	errs = append(errs, validation.ValidateEtcdSnapshotRequest(c.Annotations, spec)...)
	errs = append(errs, validateMachineNaming(&spec.MachineNaming, field.NewPath("spec"))...)
	errs = append(errs, validateSharedConfig(&spec.KairosConfigSpec, field.NewPath("spec"))...)
	return validation.KairosControlPlaneSpecWarnings(spec, field.NewPath("spec")), invalid("KairosControlPlane", c.Name, withDryRun(errs, spec.KairosConfigTemplate, &spec.KairosConfigSpec, spec.Distribution, spec.Etcd.Snapshots, field.NewPath("spec")))
}

// ValidateUpdate validates a change: the distribution is fixed and the version only moves
// forward, one minor at a time.
func (w *KairosControlPlane) ValidateUpdate(_ context.Context, oldC, newC *controlplanev1.KairosControlPlane) (admission.Warnings, error) {
	spec := defaulted(newC)
	errs := validation.ValidateKairosControlPlaneSpecUpdate(spec, defaulted(oldC), field.NewPath("spec"))
	errs = append(errs, validation.ValidateEtcdSnapshotRequest(newC.Annotations, spec)...)
	errs = append(errs, validateMachineNaming(&spec.MachineNaming, field.NewPath("spec"))...)
	errs = append(errs, validateSharedConfig(&spec.KairosConfigSpec, field.NewPath("spec"))...)
	return validation.KairosControlPlaneSpecWarnings(spec, field.NewPath("spec")), invalid("KairosControlPlane", newC.Name, withDryRun(errs, spec.KairosConfigTemplate, &spec.KairosConfigSpec, spec.Distribution, spec.Etcd.Snapshots, field.NewPath("spec")))
}

// validateSharedConfig applies the bootstrap provider's rules for specs many Machines share to
// the embedded kairosConfigSpec: every control-plane Machine gets it, so a literal hostname (in
// the spec or in a fragment) would give them all the same name. fld is the spec holding
// kairosConfigSpec.
func validateSharedConfig(cfg *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	return kcvalidation.ValidateSharedKairosConfigSpec(cfg, fld.Child("kairosConfigSpec"))
}

// validateMachineNaming renders the machine naming template as the controller will, with
// placeholder names: a template that cannot be rendered, or renders an invalid Machine name,
// would stop the control plane at its next Machine. fld is the spec holding machineNaming. The
// spec validation (package validation) has already refused a template without {{ .random }}.
func validateMachineNaming(naming *controlplanev1.MachineNamingSpec, fld *field.Path) field.ErrorList {
	if naming.Template == "" || !strings.Contains(naming.Template, "{{ .random }}") {
		return nil
	}
	if _, err := desiredstate.MachineName(naming.Template, "cluster", "controlplane", "abcde"); err != nil {
		return field.ErrorList{field.Invalid(fld.Child("machineNaming", "template"), naming.Template, err.Error())}
	}
	return nil
}

// withDryRun adds the bootstrap provider's dry render of the inline KairosConfig spec with the
// etcd snapshots the control plane adds, so that a spec every control-plane Machine would be
// refused data for is refused here, when the user can still fix it, instead of stalling the
// control plane. Problems of the snapshots are reported where the user wrote them,
// spec.etcd.snapshots, not at the kairosConfigSpec field the control plane fills.
func withDryRun(errs field.ErrorList, tmpl *controlplanev1.KairosConfigTemplateReference, cfg *bootstrapv1.KairosConfigSpec, dist bootstrapv1.Distribution, snapshots *bootstrapv1.EtcdSnapshots, fld *field.Path) field.ErrorList {
	if len(errs) > 0 || tmpl != nil {
		return errs
	}
	out := dryrun.Render(desiredstate.KairosConfigSpec(cfg, dist, false, snapshots), fld.Child("kairosConfigSpec"))
	from, to := fld.Child("kairosConfigSpec", "etcdSnapshots").String(), fld.Child("etcd", "snapshots").String()
	for _, e := range out {
		if e.Field == from || strings.HasPrefix(e.Field, from+".") {
			e.Field = to + strings.TrimPrefix(e.Field, from)
		}
	}
	return out
}

// ValidateDelete allows every deletion.
func (w *KairosControlPlane) ValidateDelete(context.Context, *controlplanev1.KairosControlPlane) (admission.Warnings, error) {
	return nil, nil
}

func defaulted(c *controlplanev1.KairosControlPlane) *controlplanev1.KairosControlPlaneSpec {
	spec := c.Spec.DeepCopy()
	spec.Default()
	return spec
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(controlplanev1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplanetemplate,mutating=true,failurePolicy=fail,groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanetemplates,versions=v1beta2,name=default.kairoscontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplanetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanetemplates,versions=v1beta2,name=validation.kairoscontrolplanetemplate.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// KairosControlPlaneTemplate defaults and validates KairosControlPlaneTemplates.
type KairosControlPlaneTemplate struct{}

var (
	_ admission.Defaulter[*controlplanev1.KairosControlPlaneTemplate] = &KairosControlPlaneTemplate{}
	_ admission.Validator[*controlplanev1.KairosControlPlaneTemplate] = &KairosControlPlaneTemplate{}
)

// SetupWebhookWithManager registers the webhook.
func (w *KairosControlPlaneTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &controlplanev1.KairosControlPlaneTemplate{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default fills the defaults.
func (w *KairosControlPlaneTemplate) Default(_ context.Context, t *controlplanev1.KairosControlPlaneTemplate) error {
	t.Spec.Template.Spec.Default()
	return nil
}

// ValidateCreate validates a new template.
func (w *KairosControlPlaneTemplate) ValidateCreate(_ context.Context, t *controlplanev1.KairosControlPlaneTemplate) (admission.Warnings, error) {
	return nil, invalid("KairosControlPlaneTemplate", t.Name, validateTemplate(t))
}

// ValidateUpdate keeps templates immutable, except for the topology controller's dry runs,
// which compute diffs and never persist.
func (w *KairosControlPlaneTemplate) ValidateUpdate(ctx context.Context, oldT, newT *controlplanev1.KairosControlPlaneTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request inside context: %v", err))
	}
	errs := validateTemplate(newT)
	if !topology.IsDryRunRequest(req, newT) {
		oldSpec, newSpec := oldT.Spec.Template.Spec.DeepCopy(), newT.Spec.Template.Spec.DeepCopy()
		oldSpec.Default()
		newSpec.Default()
		if !equality.Semantic.DeepEqual(oldSpec, newSpec) {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "template", "spec"),
				"KairosControlPlaneTemplate spec is immutable: create a new template and point the ClusterClass at it"))
		}
	}
	return nil, invalid("KairosControlPlaneTemplate", newT.Name, errs)
}

// ValidateDelete allows every deletion.
func (w *KairosControlPlaneTemplate) ValidateDelete(context.Context, *controlplanev1.KairosControlPlaneTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validateTemplate(t *controlplanev1.KairosControlPlaneTemplate) field.ErrorList {
	spec := t.Spec.Template.Spec.DeepCopy()
	spec.Default()
	fld := field.NewPath("spec", "template", "spec")
	errs := t.Spec.Template.ObjectMeta.Validate(field.NewPath("spec", "template", "metadata"))
	errs = append(errs, validation.ValidateKairosControlPlaneTemplateResourceSpec(spec, fld)...)
	errs = append(errs, validateMachineNaming(&spec.MachineNaming, fld)...)
	errs = append(errs, validateSharedConfig(&spec.KairosConfigSpec, fld)...)
	return withDryRun(errs, spec.KairosConfigTemplate, &spec.KairosConfigSpec, spec.Distribution, spec.Etcd.Snapshots, fld)
}
