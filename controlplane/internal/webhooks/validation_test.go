package webhooks

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// causeAt reports whether err is an Invalid API error with a cause of type typ at fieldPath
// whose message ends in detail.
func causeAt(err error, fieldPath string, typ metav1.CauseType, detail string) bool {
	status, ok := err.(apierrors.APIStatus)
	if !apierrors.IsInvalid(err) || !ok || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == fieldPath && c.Type == typ && strings.HasSuffix(c.Message, detail) {
			return true
		}
	}
	return false
}

// TestWebhooksRefuseInTheSameWords: the spec validation moved from the control-plane API
// package to controlplane/validation, and the embedded kairosConfigSpec's to
// common/provider/validation (issue 19). Through the KairosControlPlane and
// KairosControlPlaneTemplate webhooks, the rules of each part still refuse at their field with
// the words they had in the API packages (written out here, so that a changed message fails).
func TestWebhooksRefuseInTheSameWords(t *testing.T) {
	ctx := context.Background()
	kcp := func(mutate func(*controlplanev1.KairosControlPlaneSpec)) *controlplanev1.KairosControlPlane {
		spec := validSpec()
		if mutate != nil {
			mutate(&spec)
		}
		return &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp"}, Spec: spec}
	}

	// KairosControlPlane only (replicas, version and the infrastructure template are not in a
	// template).
	for _, tc := range []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneSpec)
		field  string
		typ    metav1.CauseType
		detail string
	}{
		{"even replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](2) },
			"spec.replicas", metav1.CauseTypeFieldValueInvalid, "must be odd: 2 etcd members tolerate no more failures than 1 and need one more member for quorum; use 1 or 3"},
		{"k0s before the EtcdMember API", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.29.4" },
			"spec.version", metav1.CauseTypeFieldValueInvalid, "k0s releases before v1.30.0 have no EtcdMember API, which the control plane uses to make a controller leave etcd before its Machine goes: use v1.30.0 or later"},
		{"no infrastructure template", func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineTemplate.Spec.InfrastructureRef.Kind = "" },
			"spec.machineTemplate.spec.infrastructureRef", metav1.CauseTypeFieldValueRequired, "set apiGroup, kind and name of the infrastructure machine template to clone, for example apiGroup: infrastructure.cluster.x-k8s.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := (&KairosControlPlane{}).ValidateCreate(ctx, kcp(tc.mutate)); !causeAt(err, tc.field, tc.typ, tc.detail) {
				t.Errorf("no %s cause at %s ending in %q: %v", tc.typ, tc.field, tc.detail, err)
			}
		})
	}

	// Rules of both: the shared ones of controlplane/validation, and those of the embedded
	// KairosConfigSpec (common/provider/validation), applied with role control-plane and the
	// control plane's distribution.
	for _, tc := range []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneSpec)
		field  string // under the spec
		typ    metav1.CauseType
		detail string
	}{
		{"config spec and template", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}, "kairosConfigSpec", metav1.CauseTypeForbidden, "kairosConfigSpec and kairosConfigTemplate are mutually exclusive: keep one"},
		{"embedded role", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleWorker },
			"kairosConfigSpec.role", metav1.CauseTypeFieldValueInvalid, "control-plane Machines have role control-plane: remove it"},
		{"embedded distribution", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s
		},
			"kairosConfigSpec.distribution", metav1.CauseTypeFieldValueInvalid, "differs from spec.distribution k0s: remove it, the control plane sets it"},
		{"embedded singleNode", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.SingleNode = true },
			"kairosConfigSpec.singleNode", metav1.CauseTypeForbidden, "the control plane sets single-node mode itself when replicas is 1: remove it"},
		{"embedded kubernetesVersion", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.KubernetesVersion = "v1.31.2" },
			"kairosConfigSpec.kubernetesVersion", metav1.CauseTypeForbidden, "the control plane's spec.version applies: remove it"},
		{"rollout type", func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.Type = "OnDelete" },
			"rollout.strategy.type", metav1.CauseTypeFieldValueNotSupported, `supported values: "RollingUpdate"`},
		{"naming without random", func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineNaming.Template = "cp-{{ .cluster.name }}" },
			"machineNaming.template", metav1.CauseTypeFieldValueInvalid, "must contain {{ .random }} so that Machine names are unique"},
		{"embedded worker token", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
		}, "kairosConfigSpec.workerTokenSecretRef", metav1.CauseTypeForbidden, "only workers use a worker token: remove it (control-plane credentials are generated)"},
		{"embedded user name", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.UserName = "Root" },
			"kairosConfigSpec.userName", metav1.CauseTypeFieldValueInvalid, "must be a Linux user name: lower case letters, digits, _ or -, starting with a letter or _, at most 32 characters"},
		{"embedded install device", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.Install = &bootstrapv1.Install{Device: "sda"}
		}, "kairosConfigSpec.install.device", metav1.CauseTypeFieldValueInvalid, "must be auto or a device path such as /dev/sda or /dev/disk/by-id/..."},
		{"embedded k3s options on k0s", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		}, "kairosConfigSpec.k3s", metav1.CauseTypeForbidden, "k3s options do not apply to distribution k0s: move them to spec.k0s or set distribution: k3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errK := (&KairosControlPlane{}).ValidateCreate(ctx, kcp(tc.mutate))
			if !causeAt(errK, "spec."+tc.field, tc.typ, tc.detail) {
				t.Errorf("KairosControlPlane: no %s cause at spec.%s ending in %q: %v", tc.typ, tc.field, tc.detail, errK)
			}
			spec := validSpec()
			tc.mutate(&spec)
			_, errT := (&KairosControlPlaneTemplate{}).ValidateCreate(ctx, kcpTemplate(nil, func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
				s.Distribution, s.KairosConfigSpec, s.KairosConfigTemplate = spec.Distribution, spec.KairosConfigSpec, spec.KairosConfigTemplate
				s.Rollout, s.MachineNaming = spec.Rollout, spec.MachineNaming
			}))
			if !causeAt(errT, "spec.template.spec."+tc.field, tc.typ, tc.detail) {
				t.Errorf("KairosControlPlaneTemplate: no %s cause at spec.template.spec.%s ending in %q: %v", tc.typ, tc.field, tc.detail, errT)
			}
		})
	}

	// Updates: the version moves forward one minor at a time, the distribution is fixed.
	old := kcp(nil)
	for _, tc := range []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneSpec)
		field  string
		detail string
	}{
		{"downgrade", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.30.9" },
			"spec.version", "cannot go down from v1.31.2 to v1.30.9: Kubernetes does not support downgrades; keep v1.31.2 or move forward"},
		{"skipped minor", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.33.0" },
			"spec.version", "cannot skip a minor version (v1.31.2 to v1.33.0): upgrade to v1.32.x first"},
		{"distribution", func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = bootstrapv1.DistributionK3s },
			"spec.distribution", "cannot change from k0s to k3s: a cluster cannot switch distribution in place; create a new cluster and move the workloads"},
	} {
		t.Run("update "+tc.name, func(t *testing.T) {
			if _, err := (&KairosControlPlane{}).ValidateUpdate(ctx, old, kcp(tc.mutate)); !causeAt(err, tc.field, metav1.CauseTypeForbidden, tc.detail) {
				t.Errorf("no Forbidden cause at %s ending in %q: %v", tc.field, tc.detail, err)
			}
		})
	}
}
