package webhooks

import (
	"context"
	"fmt"
	"net/http"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/validation"
)

// +kubebuilder:webhook:verbs=update,path=/validate-scale-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplane,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanes/scale,versions=v1beta2,name=validation-scale.kairoscontrolplane.controlplane.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// ScaleValidator validates `kubectl scale` (the scale subresource), which bypasses the
// KairosControlPlane webhook: the new replica count must keep the spec valid.
type ScaleValidator struct {
	Client  client.Reader
	decoder admission.Decoder
}

// SetupWebhookWithManager registers the handler.
func (v *ScaleValidator) SetupWebhookWithManager(mgr ctrl.Manager) error {
	v.decoder = admission.NewDecoder(mgr.GetScheme())
	mgr.GetWebhookServer().Register("/validate-scale-controlplane-cluster-x-k8s-io-v1beta2-kairoscontrolplane", &webhook.Admission{Handler: v})
	return nil
}

// Handle validates a scale request against the KairosControlPlane it scales.
func (v *ScaleValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	scale := &autoscalingv1.Scale{}
	if err := v.decoder.Decode(req, scale); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Scale: %w", err))
	}
	kcp := &controlplanev1.KairosControlPlane{}
	if err := v.Client.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, kcp); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading KairosControlPlane %s: %w", req.Name, err))
	}
	spec := defaulted(kcp)
	replicas := scale.Spec.Replicas
	spec.Replicas = &replicas
	errs := validation.ValidateKairosControlPlaneSpec(spec, field.NewPath("spec"))
	errs = append(errs, validateMachineNaming(&spec.MachineNaming, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	return admission.Allowed("").WithWarnings(validation.KairosControlPlaneSpecWarnings(spec, field.NewPath("spec"))...)
}
