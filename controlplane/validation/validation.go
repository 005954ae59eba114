// Package validation is the Go validation of KairosControlPlane and KairosControlPlaneTemplate
// specs that the control-plane provider's admission webhooks run. It is not in the API package:
// it shares the renderer's grammar (common/syntax) and checks the embedded kairosConfigSpec with
// the bootstrap provider's rules (common/provider/validation), and an API package that imported
// those would make every consumer of the API types require the renderer and yip. It is not
// internal either, so that the release checks of the shipped templates and the integration
// tests run the webhooks' rules, not a copy.
package validation

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	kcvalidation "github.com/kairos-capi/kairos-capi/common/provider/validation"
	"github.com/kairos-capi/kairos-capi/common/syntax"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// minimumK0sVersion is the first k0s release with the declarative etcd member API
// (EtcdMember objects with spec.leave): "Starting from version 1.30, k0s also supports a
// declarative way to remove an etcd member" (docs.k0sproject.io, remove_controller).
var minimumK0sVersion = version.MustParseSemantic("v1.30.0")

// ValidateKairosControlPlaneSpec checks a defaulted KairosControlPlaneSpec.
func ValidateKairosControlPlaneSpec(s *controlplanev1.KairosControlPlaneSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Replicas != nil && *s.Replicas < 1 {
		errs = append(errs, field.Invalid(fld.Child("replicas"), *s.Replicas,
			"must be at least 1: to remove the control plane, delete the Cluster"))
	}
	if s.Replicas != nil && *s.Replicas > 1 && *s.Replicas%2 == 0 {
		errs = append(errs, field.Invalid(fld.Child("replicas"), *s.Replicas,
			fmt.Sprintf("must be odd: %d etcd members tolerate no more failures than %d and need one more member for quorum; use %d or %d",
				*s.Replicas, *s.Replicas-1, *s.Replicas-1, *s.Replicas+1)))
	}
	if v, err := syntax.ParseKubernetesVersion(s.Version); err != nil {
		errs = append(errs, field.Invalid(fld.Child("version"), s.Version, "must be a semantic version with a leading v, for example v1.31.2"))
	} else if s.Distribution == bootstrapv1.DistributionK0s && syntax.CompareRelease(v, minimumK0sVersion) < 0 {
		errs = append(errs, field.Invalid(fld.Child("version"), s.Version, fmt.Sprintf(
			"k0s releases before v%[1]s have no EtcdMember API, which the control plane uses to make a controller leave etcd before its Machine goes: use v%[1]s or later",
			minimumK0sVersion)))
	}
	ref := s.MachineTemplate.Spec.InfrastructureRef
	if ref.Name == "" || ref.Kind == "" || ref.APIGroup == "" {
		errs = append(errs, field.Required(fld.Child("machineTemplate", "spec", "infrastructureRef"),
			"set apiGroup, kind and name of the infrastructure machine template to clone, for example apiGroup: infrastructure.cluster.x-k8s.io"))
	}
	errs = append(errs, s.MachineTemplate.ObjectMeta.Validate(fld.Child("machineTemplate", "metadata"))...)
	errs = append(errs, validateShared(fld, s.Distribution, &s.KairosConfigSpec, s.KairosConfigTemplate, &s.Rollout, &s.MachineNaming, &s.Kubeconfig)...)
	errs = append(errs, validateEtcd(&s.Etcd, &s.KairosConfigSpec, fld)...)
	// The embedded spec has no kubernetesVersion (spec.version applies, validateShared): its image
	// must ship spec.version. An image of the other distribution is reported by the embedded
	// spec's own validation.
	if img, ok := syntax.ParseKairosImage(s.KairosConfigSpec.Image); ok && s.KairosConfigTemplate == nil && img.Distribution == string(s.Distribution) {
		errs = append(errs, kcvalidation.ValidateImageVersion(s.KairosConfigSpec.Image, s.Version,
			fld.Child("kairosConfigSpec", "image"), fld.Child("version"))...)
	}

	// One replica without surge is the single-node edge cluster on fixed hardware: it can only
	// change in place (a replacement would remove the only etcd member first), which the warning
	// says. Two replicas are refused for being even already.
	if noSurge(s) && s.Replicas != nil && *s.Replicas == 2 {
		errs = append(errs, field.Forbidden(fld.Child("rollout", "strategy", "rollingUpdate", "maxSurge"),
			fmt.Sprintf("maxSurge 0 removes a Machine before replacing it, which with %d replicas loses etcd quorum: use maxSurge 1 or at least 3 replicas", *s.Replicas)))
	}
	return errs
}

func noSurge(s *controlplanev1.KairosControlPlaneSpec) bool {
	surge := s.Rollout.Strategy.RollingUpdate.MaxSurge
	return surge != nil && surge.String() == "0"
}

// KairosControlPlaneSpecWarnings returns the admission warnings of a defaulted spec.
func KairosControlPlaneSpecWarnings(s *controlplanev1.KairosControlPlaneSpec, fld *field.Path) []string {
	var warnings []string
	if noSurge(s) && s.Replicas != nil && *s.Replicas == 1 {
		warnings = append(warnings, fld.Child("rollout", "strategy", "rollingUpdate", "maxSurge").String()+
			": 0 with 1 replica: only changes that can be made in place proceed (Cluster API's InPlaceUpdates and RuntimeSDK feature gates, "+
			"the Kairos update extension registered, spec.version and kairosConfigSpec.image changed together); any other change waits, "+
			"since replacing the only Machine would remove the cluster's only etcd member first. Use maxSurge 1 where a second machine can be created")
	}
	if s.KairosConfigTemplate == nil {
		cfg := asMachineConfig(&s.KairosConfigSpec, s.Distribution)
		warnings = append(warnings, kcvalidation.KairosConfigSpecWarnings(cfg, fld.Child("kairosConfigSpec"))...)
	}
	return warnings
}

// ValidateKairosControlPlaneSpecUpdate checks a change of a defaulted spec (old to s): what
// ValidateKairosControlPlaneSpec checks, the distribution is fixed, and the version moves
// forward at most one minor at a time.
func ValidateKairosControlPlaneSpecUpdate(s, old *controlplanev1.KairosControlPlaneSpec, fld *field.Path) field.ErrorList {
	errs := ValidateKairosControlPlaneSpec(s, fld)
	if old.Distribution != "" && s.Distribution != old.Distribution {
		errs = append(errs, field.Forbidden(fld.Child("distribution"),
			fmt.Sprintf("cannot change from %s to %s: a cluster cannot switch distribution in place; create a new cluster and move the workloads", old.Distribution, s.Distribution)))
	}
	oldV, err1 := syntax.ParseKubernetesVersion(old.Version)
	newV, err2 := syntax.ParseKubernetesVersion(s.Version)
	if err1 == nil && err2 == nil {
		switch {
		case syntax.CompareRelease(newV, oldV) < 0:
			errs = append(errs, field.Forbidden(fld.Child("version"),
				fmt.Sprintf("cannot go down from %s to %s: Kubernetes does not support downgrades; keep %s or move forward", old.Version, s.Version, old.Version)))
		case newV.Major() != oldV.Major() || newV.Minor() > oldV.Minor()+1:
			errs = append(errs, field.Forbidden(fld.Child("version"),
				fmt.Sprintf("cannot skip a minor version (%s to %s): upgrade to v%d.%d.x first", old.Version, s.Version, oldV.Major(), oldV.Minor()+1)))
		}
	}
	return errs
}

// ValidateKairosControlPlaneTemplateResourceSpec checks a defaulted template spec.
func ValidateKairosControlPlaneTemplateResourceSpec(s *controlplanev1.KairosControlPlaneTemplateResourceSpec, fld *field.Path) field.ErrorList {
	errs := s.MachineTemplate.ObjectMeta.Validate(fld.Child("machineTemplate", "metadata"))
	errs = append(errs, validateShared(fld, s.Distribution, &s.KairosConfigSpec, s.KairosConfigTemplate, &s.Rollout, &s.MachineNaming, &s.Kubeconfig)...)
	return append(errs, validateEtcd(&s.Etcd, &s.KairosConfigSpec, fld)...)
}

// msgSnapshotsInConfigSpec and msgRestoreInSpec are the CEL rules' messages.
const (
	msgSnapshotsInConfigSpec = "the control plane sets it from spec.etcd.snapshots: move it there"
	msgRestoreInSpec         = "the control plane sets restore itself, on the replacement of its last Machine: remove it"
)

// validateEtcd checks spec.etcd: the snapshots with the bootstrap provider's rules, and no
// snapshots in kairosConfigSpec, where the control plane puts spec.etcd.snapshots itself.
func validateEtcd(etcd *controlplanev1.KairosControlPlaneEtcdSpec, cfg *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	errs := kcvalidation.ValidateEtcdSnapshots(etcd.Snapshots, fld.Child("etcd", "snapshots"))
	if etcd.Snapshots != nil && etcd.Snapshots.Restore != "" {
		errs = append(errs, field.Forbidden(fld.Child("etcd", "snapshots", "restore"), msgRestoreInSpec))
	}
	if cfg.EtcdSnapshots != nil {
		errs = append(errs, field.Forbidden(fld.Child("kairosConfigSpec", "etcdSnapshots"), msgSnapshotsInConfigSpec))
	}
	return errs
}

// validateShared checks the fields a KairosControlPlane and its template have in common.
func validateShared(fld *field.Path, dist bootstrapv1.Distribution, cfg *bootstrapv1.KairosConfigSpec, tmpl *controlplanev1.KairosConfigTemplateReference,
	rollout *controlplanev1.KairosControlPlaneRolloutSpec, naming *controlplanev1.MachineNamingSpec, kubeconfig *controlplanev1.KairosControlPlaneKubeconfigSpec) field.ErrorList {
	var errs field.ErrorList
	switch dist {
	case bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s:
	default:
		errs = append(errs, field.NotSupported(fld.Child("distribution"), dist, []bootstrapv1.Distribution{bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s}))
	}

	cfgPath := fld.Child("kairosConfigSpec")
	if tmpl != nil && !isZeroConfigSpec(cfg) {
		errs = append(errs, field.Forbidden(cfgPath, "kairosConfigSpec and kairosConfigTemplate are mutually exclusive: keep one"))
	}
	if cfg.Role != "" && cfg.Role != bootstrapv1.RoleControlPlane {
		errs = append(errs, field.Invalid(cfgPath.Child("role"), cfg.Role, "control-plane Machines have role control-plane: remove it"))
	}
	if cfg.Distribution != "" && cfg.Distribution != dist {
		errs = append(errs, field.Invalid(cfgPath.Child("distribution"), cfg.Distribution,
			fmt.Sprintf("differs from spec.distribution %s: remove it, the control plane sets it", dist)))
	}
	if cfg.SingleNode {
		errs = append(errs, field.Forbidden(cfgPath.Child("singleNode"),
			"the control plane sets single-node mode itself when replicas is 1: remove it"))
	}
	if cfg.KubernetesVersion != "" {
		errs = append(errs, field.Forbidden(cfgPath.Child("kubernetesVersion"), "the control plane's spec.version applies: remove it"))
	}
	if tmpl == nil && (dist == bootstrapv1.DistributionK0s || dist == bootstrapv1.DistributionK3s) {
		errs = append(errs, kcvalidation.ValidateKairosConfigSpec(asMachineConfig(cfg, dist), cfgPath)...)
	}

	if t := rollout.Strategy.Type; t != "" && t != controlplanev1.RollingUpdateStrategyType {
		errs = append(errs, field.NotSupported(fld.Child("rollout", "strategy", "type"), t, []controlplanev1.RolloutStrategyType{controlplanev1.RollingUpdateStrategyType}))
	}
	if surge := rollout.Strategy.RollingUpdate.MaxSurge; surge != nil {
		if s := surge.String(); s != "0" && s != "1" {
			errs = append(errs, field.Invalid(fld.Child("rollout", "strategy", "rollingUpdate", "maxSurge"), s,
				"must be 0 or 1: control-plane Machines are replaced one at a time"))
		}
	}
	// The controller renders the template; the webhook renders it once with placeholder names
	// to refuse a template that cannot name a Machine.
	if naming.Template != "" && !strings.Contains(naming.Template, "{{ .random }}") {
		errs = append(errs, field.Invalid(fld.Child("machineNaming", "template"), naming.Template, "must contain {{ .random }} so that Machine names are unique"))
	}
	errs = append(errs, kubeconfig.ObjectMeta.Validate(fld.Child("kubeconfig", "metadata"))...)
	return errs
}

func isZeroConfigSpec(s *bootstrapv1.KairosConfigSpec) bool { return reflect.ValueOf(*s).IsZero() }

// asMachineConfig is the embedded KairosConfig spec as the bootstrap provider will validate
// it on every control-plane Machine: with the role and distribution the control plane sets
// (single-node mode, which depends on the replica count, does not change what is valid), and
// the bootstrap API's defaults. The controller's own copy of this, with single-node mode, is
// what it creates and compares Machines with.
func asMachineConfig(cfg *bootstrapv1.KairosConfigSpec, dist bootstrapv1.Distribution) *bootstrapv1.KairosConfigSpec {
	spec := cfg.DeepCopy()
	spec.Role = bootstrapv1.RoleControlPlane
	spec.Distribution = dist
	spec.Default()
	return spec
}

// etcdSnapshotRequestPattern is what EtcdSnapshotRequestAnnotation may hold: the nodes compare
// and store the value in a shell script, so it is kept to characters that need no quoting.
var etcdSnapshotRequestPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,63}$`)

// ValidateEtcdSnapshotRequest checks the on-demand snapshot request annotation of a control plane.
func ValidateEtcdSnapshotRequest(annotations map[string]string, s *controlplanev1.KairosControlPlaneSpec) field.ErrorList {
	v, ok := annotations[controlplanev1.EtcdSnapshotRequestAnnotation]
	if !ok {
		return nil
	}
	fld := field.NewPath("metadata", "annotations").Key(controlplanev1.EtcdSnapshotRequestAnnotation)
	var errs field.ErrorList
	if !etcdSnapshotRequestPattern.MatchString(v) {
		errs = append(errs, field.Invalid(fld, v, "must be 1-63 letters, digits, '.', '_', ':' or '-', a new value for each request: for example the time, $(date -u +%Y%m%dT%H%M%SZ)"))
	}
	if s.Etcd.Snapshots == nil {
		errs = append(errs, field.Forbidden(fld, "on-demand etcd snapshots need spec.etcd.snapshots (the store to upload them to): set it first"))
	}
	return errs
}
