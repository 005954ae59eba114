package validation_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/validation"
)

var specPath = field.NewPath("spec")

func surge(v int32) *intstr.IntOrString { s := intstr.FromInt32(v); return &s }

// validSpec is a KairosControlPlane spec every failing case below breaks in one way.
func validSpec() controlplanev1.KairosControlPlaneSpec {
	return controlplanev1.KairosControlPlaneSpec{
		Replicas: ptr.To[int32](3),
		Version:  "v1.31.2",
		MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachineTemplate", Name: "cp"},
		}},
		KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"},
	}
}

// check asserts that errs holds an error on exactly the field wantField whose text contains
// every string of want, or that errs is empty when wantField is "".
func check(t *testing.T, errs field.ErrorList, wantField string, want ...string) {
	t.Helper()
	if wantField == "" {
		if len(errs) != 0 {
			t.Errorf("want no errors, got:\n%v", errs.ToAggregate())
		}
		return
	}
	if len(errs) == 0 {
		t.Errorf("accepted, want an error on %s", wantField)
		return
	}
	for _, e := range errs {
		if e.Field != wantField {
			continue
		}
		msg := e.Error()
		missing := false
		for _, w := range want {
			if !strings.Contains(msg, w) {
				missing = true
			}
		}
		if !missing {
			return
		}
	}
	t.Errorf("no error on %s containing %q; got:\n%v", wantField, want, errs.ToAggregate())
}

// invalidSpecs break validSpec once each. field is the full path of the expected error, want
// the strings that tell the user what to do.
var invalidSpecs = []struct {
	name   string
	mutate func(*controlplanev1.KairosControlPlaneSpec)
	field  string
	want   []string
}{
	// replicas and version
	{"zero replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](0) }, "spec.replicas", []string{"at least 1", "delete the Cluster"}},
	{"negative replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](-1) }, "spec.replicas", []string{"at least 1"}},
	{"version without v", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "1.31.2" }, "spec.version", []string{"leading v, for example v1.31.2"}},
	{"version without patch", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.31" }, "spec.version", []string{"semantic version"}},
	{"empty version", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "" }, "spec.version", []string{"semantic version"}},
	{"two replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](2) }, "spec.replicas",
		[]string{"must be odd: 2 etcd members tolerate no more failures than 1", "use 1 or 3"}},
	{"four replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](4) }, "spec.replicas", []string{"must be odd", "use 3 or 5"}},
	{"k0s without the EtcdMember API", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Distribution, s.Version = bootstrapv1.DistributionK0s, "v1.29.15+k0s.0"
	}, "spec.version", []string{"k0s releases before v1.30.0 have no EtcdMember API", "use v1.30.0 or later"}},
	// infrastructure reference
	{"no infrastructureRef", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.MachineTemplate.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{}
	}, "spec.machineTemplate.spec.infrastructureRef", []string{"set apiGroup, kind and name", "infrastructure.cluster.x-k8s.io"}},
	{"infrastructureRef without name", func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineTemplate.Spec.InfrastructureRef.Name = "" }, "spec.machineTemplate.spec.infrastructureRef", []string{"set apiGroup, kind and name"}},
	{"infrastructureRef without kind", func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineTemplate.Spec.InfrastructureRef.Kind = "" }, "spec.machineTemplate.spec.infrastructureRef", []string{"set apiGroup, kind and name"}},
	{"infrastructureRef without apiGroup", func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineTemplate.Spec.InfrastructureRef.APIGroup = "" }, "spec.machineTemplate.spec.infrastructureRef", []string{"set apiGroup, kind and name"}},
	// Machine metadata
	{"machine label key", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.MachineTemplate.ObjectMeta.Labels = map[string]string{"bad key!": "x"}
	}, "spec.machineTemplate.metadata.labels", []string{"bad key!", "alphanumeric"}},
	{"machine label value", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.MachineTemplate.ObjectMeta.Labels = map[string]string{"team": "a b"}
	}, "spec.machineTemplate.metadata.labels", []string{"a b", "alphanumeric"}},
	{"machine annotation key", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.MachineTemplate.ObjectMeta.Annotations = map[string]string{"/x": "y"}
	}, "spec.machineTemplate.metadata.annotations", []string{"/x"}},
	// distribution
	{"unknown distribution", func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = "rke2" }, "spec.distribution", []string{`"k0s"`, `"k3s"`}},
	// kairosConfigSpec vs kairosConfigTemplate
	{"config spec and template", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
	}, "spec.kairosConfigSpec", []string{"mutually exclusive", "keep one"}},
	// provider-owned fields of the embedded spec
	{"embedded role worker", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleWorker }, "spec.kairosConfigSpec.role", []string{"role control-plane", "remove it"}},
	{"embedded role unknown", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Role = "master" }, "spec.kairosConfigSpec.role", []string{"remove it"}},
	{"embedded distribution differs", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s
	}, "spec.kairosConfigSpec.distribution", []string{"differs from spec.distribution k0s", "remove it"}},
	{"embedded singleNode", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.SingleNode = true }, "spec.kairosConfigSpec.singleNode", []string{"replicas is 1", "remove it"}},
	{"embedded kubernetesVersion", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.KubernetesVersion = "v1.31.2" }, "spec.kairosConfigSpec.kubernetesVersion", []string{"spec.version applies", "remove it"}},
	// the Kairos image must ship spec.version (the embedded spec has no kubernetesVersion)
	{"embedded image of another version", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.32.0-k0s.0"
	}, "spec.kairosConfigSpec.image", []string{"ships k0s v1.32.0+k0s.0", "spec.version is v1.31.2", "change spec.version to v1.32.0"}},
	{"embedded image of the other distribution", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
	}, "spec.kairosConfigSpec.image", []string{"ships k3s", "distribution is k0s"}},
	// bootstrap rules surface under spec.kairosConfigSpec
	{"embedded user name", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.UserName = "Root User" }, "spec.kairosConfigSpec.userName", []string{"Linux user name"}},
	{"embedded password twice", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
	}, "spec.kairosConfigSpec.userPassword", []string{"keep only userPasswordSecretRef"}},
	{"embedded worker token", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
	}, "spec.kairosConfigSpec.workerTokenSecretRef", []string{"only workers use a worker token"}},
	{"embedded k3s options on k0s", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, "spec.kairosConfigSpec.k3s", []string{"set distribution: k3s"}},
	// Managed flags and forbidden fragment keys of the embedded spec are the bootstrap
	// renderer's rules (common/render), which admission reaches through the dry render: see
	// internal/webhooks and test/controlplane.
	{"embedded relative file", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "etc/motd", Content: "hi"}}
	}, "spec.kairosConfigSpec.files[0].path", []string{"absolute, clean file path"}},
	{"embedded manifest name", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.KairosConfigSpec.Manifests = []bootstrapv1.Manifest{{Name: "cni", Content: "a: b"}}
	}, "spec.kairosConfigSpec.manifests[0].name", []string{"ending in .yaml"}},
	// rollout
	{"rollout type", func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.Type = "Recreate" }, "spec.rollout.strategy.type", []string{`"RollingUpdate"`}},
	{"maxSurge 2", func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(2) }, "spec.rollout.strategy.rollingUpdate.maxSurge", []string{"must be 0 or 1", "one at a time"}},
	{"maxSurge percent", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("50%"))
	}, "spec.rollout.strategy.rollingUpdate.maxSurge", []string{"must be 0 or 1"}},
	{"maxSurge 0 with two replicas", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Replicas = ptr.To[int32](2)
		s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0)
	}, "spec.rollout.strategy.rollingUpdate.maxSurge", []string{"with 2 replicas", "at least 3 replicas"}},
	{"maxSurge \"0\" with two replicas", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Replicas = ptr.To[int32](2)
		s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("0"))
	}, "spec.rollout.strategy.rollingUpdate.maxSurge", []string{"at least 3 replicas"}},
	// Machine naming
	{"naming without random", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.MachineNaming.Template = "{{ .kairosControlPlane.name }}"
	}, "spec.machineNaming.template", []string{"must contain {{ .random }}"}},
	// kubeconfig Secret metadata
	{"kubeconfig label", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Kubeconfig.ObjectMeta.Labels = map[string]string{"bad key!": "x"}
	}, "spec.kubeconfig.metadata.labels", []string{"bad key!"}},
	{"kubeconfig annotation", func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Kubeconfig.ObjectMeta.Annotations = map[string]string{"a/b/c": "x"}
	}, "spec.kubeconfig.metadata.annotations", []string{"a/b/c"}},
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range invalidSpecs {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(&s)
			s.Default()
			check(t, validation.ValidateKairosControlPlaneSpec(&s, specPath), tc.field, tc.want...)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneSpec)
	}{
		{"valid spec", func(*controlplanev1.KairosControlPlaneSpec) {}},
		{"defaults only", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = nil
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
		}},
		{"k3s", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Distribution = bootstrapv1.DistributionK3s
			s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		}},
		{"one replica", func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](1) }},
		// The single-node edge cluster, which can only change in place (warned: TestWarnings).
		{"one replica without surge", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = ptr.To[int32](1)
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0)
		}},
		{"pre-release and build version", func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.32.0-rc.1+k0s.0" }},
		{"maxSurge 0 with three replicas", func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0) }},
		{"maxSurge 0 with five replicas", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = ptr.To[int32](5)
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0)
		}},
		{"maxSurge \"1\"", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("1"))
		}},
		{"maxSurge 1 with one replica", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = ptr.To[int32](1)
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(1)
		}},
		{"template instead of spec", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}},
		{"embedded image of spec.version", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.31.2-k0s.0"
		}},
		{"embedded role control-plane", func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleControlPlane }},
		{"embedded distribution equal", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Distribution = bootstrapv1.DistributionK3s
			s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s
		}},
		{"embedded control-plane-only settings", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.Manifests = []bootstrapv1.Manifest{{Name: "cni.yaml", Content: "kind: ConfigMap"}}
			s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Config: "spec:\n  telemetry:\n    enabled: false\n"}
		}},
		{"naming template", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineNaming.Template = "{{ .cluster.name }}-cp-{{ .random }}"
		}},
		{"default naming template", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineNaming.Template = controlplanev1.DefaultMachineNamingTemplate
		}},
		{"metadata", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineTemplate.ObjectMeta = clusterv1.ObjectMeta{Labels: map[string]string{"example.com/team": "a"}, Annotations: map[string]string{"example.com/note": "any text"}}
			s.Kubeconfig.ObjectMeta = clusterv1.ObjectMeta{Labels: map[string]string{"team": "a"}}
		}},
		{"remediation and kubeconfig", func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Remediation.MaxRetry = ptr.To[int32](3)
			s.Kubeconfig.ClientCertificateValiditySeconds = ptr.To[int32](7200)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(&s)
			s.Default()
			check(t, validation.ValidateKairosControlPlaneSpec(&s, specPath), "")
		})
	}
}

// TestValidateErrorsCarryFieldAndFix: every message of every failing case above names a
// field under spec and says more than the bare rule.
func TestValidateErrorsCarryFieldAndFix(t *testing.T) {
	for _, tc := range invalidSpecs {
		s := validSpec()
		tc.mutate(&s)
		s.Default()
		for _, e := range validation.ValidateKairosControlPlaneSpec(&s, specPath) {
			if !strings.HasPrefix(e.Field, "spec.") {
				t.Errorf("%s: error outside spec: %v", tc.name, e)
			}
			if e.Detail == "" && e.Type != field.ErrorTypeNotSupported {
				t.Errorf("%s: error without a detail: %v", tc.name, e)
			}
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name       string
		old, new   func(*controlplanev1.KairosControlPlaneSpec)
		field      string
		want       []string
		otherField string // a field that must not be reported
	}{
		{name: "no change"},
		{name: "patch upgrade", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.31.5" }},
		{name: "minor upgrade", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.32.0" }},
		{name: "minor upgrade with build", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.32.1+k0s.0" }},
		{name: "scale", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](5) }},
		{name: "same pre-release", old: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.31.2-rc.1" }},
		{name: "patch downgrade", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.31.1" }, field: "spec.version",
			want: []string{"cannot go down from v1.31.2 to v1.31.1", "keep v1.31.2 or move forward"}},
		{name: "minor downgrade", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.30.9" }, field: "spec.version",
			want: []string{"cannot go down", "does not support downgrades"}},
		{name: "major downgrade", old: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v2.0.0" }, field: "spec.version",
			want: []string{"cannot go down from v2.0.0 to v1.31.2"}},
		{name: "minor skip", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.33.0" }, field: "spec.version",
			want: []string{"cannot skip a minor version (v1.31.2 to v1.33.0)", "upgrade to v1.32.x first"}},
		{name: "major jump", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v2.0.0" }, field: "spec.version",
			want: []string{"cannot skip a minor version"}},
		{name: "distribution change", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = bootstrapv1.DistributionK3s }, field: "spec.distribution",
			want: []string{"cannot change from k0s to k3s", "create a new cluster and move the workloads"}},
		{name: "distribution change from defaulted", old: func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = "" },
			new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = bootstrapv1.DistributionK3s }, field: "spec.distribution",
			want: []string{"cannot change from k0s to k3s"}},
		{name: "new spec validated too", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](0) }, field: "spec.replicas",
			want: []string{"at least 1"}},
		{name: "invalid new version is a format error, not an order error", new: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "1.30" },
			field: "spec.version", want: []string{"leading v"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oldS, newS := validSpec(), validSpec()
			if tc.old != nil {
				tc.old(&oldS)
			}
			if tc.new != nil {
				tc.new(&newS)
			}
			oldS.Default()
			newS.Default()
			errs := validation.ValidateKairosControlPlaneSpecUpdate(&newS, &oldS, specPath)
			check(t, errs, tc.field, tc.want...)
			if tc.field != "" && len(errs) != 1 {
				t.Errorf("want exactly one error, got %v", errs.ToAggregate())
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	const passwordWarning = "spec.kairosConfigSpec.userPassword: the login user \"kairos\" has the well-known development password"
	tests := []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneSpec)
		want   []string // substrings, one warning each
	}{
		{name: "none"},
		{name: "one replica", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](1) }},
		{name: "one replica without surge", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = ptr.To[int32](1)
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0)
		}, want: []string{"spec.rollout.strategy.rollingUpdate.maxSurge: 0 with 1 replica: only changes that can be made in place proceed"}},
		{name: "default password", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.UserPassword = "" },
			want: []string{passwordWarning + ` "kairos"; set spec.kairosConfigSpec.userPassword or spec.kairosConfigSpec.userPasswordSecretRef`}},
		{name: "explicit default password", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.UserPassword = "kairos" },
			want: []string{passwordWarning}},
		{name: "password from a Secret", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "pw"}}
		}},
		{name: "image without a version", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.Image = "registry.local/edge/node@sha256:" + strings.Repeat("ab", 32)
		}, want: []string{`spec.kairosConfigSpec.image "registry.local/edge/node@sha256:`}},
		// The referenced template warns about itself when it is created.
		{name: "config template", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			s.Default()
			got := validation.KairosControlPlaneSpecWarnings(&s, specPath)
			if len(got) != len(tc.want) {
				t.Fatalf("want %d warnings, got %d: %q", len(tc.want), len(got), got)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no warning contains %q: %q", w, got)
				}
			}
		})
	}
}

// validTemplateSpec is a KairosControlPlaneTemplate resource spec.
func validTemplateSpec() controlplanev1.KairosControlPlaneTemplateResourceSpec {
	return controlplanev1.KairosControlPlaneTemplateResourceSpec{KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"}}
}

func TestTemplateValidate(t *testing.T) {
	tmplPath := field.NewPath("spec", "template", "spec")
	tests := []struct {
		name   string
		mutate func(*controlplanev1.KairosControlPlaneTemplateResourceSpec)
		field  string
		want   []string
	}{
		{name: "valid"},
		{name: "empty", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			*s = controlplanev1.KairosControlPlaneTemplateResourceSpec{}
		}},
		{name: "k3s", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.Distribution = bootstrapv1.DistributionK3s
		}},
		// No replicas in a template: the topology sets them, so maxSurge 0 is not checked here.
		{name: "maxSurge 0", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0)
		}},
		{name: "config template", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}},
		{name: "unknown distribution", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) { s.Distribution = "rke2" },
			field: "spec.template.spec.distribution", want: []string{`"k0s"`, `"k3s"`}},
		{name: "config spec and template", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}, field: "spec.template.spec.kairosConfigSpec", want: []string{"mutually exclusive"}},
		{name: "embedded role", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigSpec.Role = bootstrapv1.RoleWorker
		},
			field: "spec.template.spec.kairosConfigSpec.role", want: []string{"remove it"}},
		{name: "embedded singleNode", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) { s.KairosConfigSpec.SingleNode = true },
			field: "spec.template.spec.kairosConfigSpec.singleNode", want: []string{"remove it"}},
		{name: "embedded kubernetesVersion", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigSpec.KubernetesVersion = "v1.31.2"
		},
			field: "spec.template.spec.kairosConfigSpec.kubernetesVersion", want: []string{"remove it"}},
		{name: "embedded distribution", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s
		}, field: "spec.template.spec.kairosConfigSpec.distribution", want: []string{"differs from spec.distribution k0s"}},
		{name: "embedded bootstrap rule", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.KairosConfigSpec.Install = &bootstrapv1.Install{Device: "sda"}
		}, field: "spec.template.spec.kairosConfigSpec.install.device", want: []string{"/dev/sda"}},
		{name: "rollout type", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) { s.Rollout.Strategy.Type = "OnDelete" },
			field: "spec.template.spec.rollout.strategy.type", want: []string{`"RollingUpdate"`}},
		{name: "maxSurge 3", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(3)
		},
			field: "spec.template.spec.rollout.strategy.rollingUpdate.maxSurge", want: []string{"must be 0 or 1"}},
		{name: "naming", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.MachineNaming.Template = "cp-{{ .cluster.name }}"
		},
			field: "spec.template.spec.machineNaming.template", want: []string{"{{ .random }}"}},
		{name: "machine metadata", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.MachineTemplate.ObjectMeta.Labels = map[string]string{"bad key!": "x"}
		}, field: "spec.template.spec.machineTemplate.metadata.labels", want: []string{"bad key!"}},
		{name: "kubeconfig metadata", mutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
			s.Kubeconfig.ObjectMeta.Annotations = map[string]string{"a/b/c": "x"}
		}, field: "spec.template.spec.kubeconfig.metadata.annotations", want: []string{"a/b/c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validTemplateSpec()
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			s.Default()
			check(t, validation.ValidateKairosControlPlaneTemplateResourceSpec(&s, tmplPath), tc.field, tc.want...)
		})
	}
}

// TestValidateCoversEveryRule fails when the failing-case table loses a rule of validation.go:
// at least one failing case per field the rules report on.
func TestValidateCoversEveryRule(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range invalidSpecs {
		covered[tc.field] = true
	}
	for _, f := range []string{
		"spec.replicas", "spec.version", "spec.machineTemplate.spec.infrastructureRef", "spec.machineTemplate.metadata.labels",
		"spec.distribution", "spec.kairosConfigSpec", "spec.kairosConfigSpec.role", "spec.kairosConfigSpec.distribution",
		"spec.kairosConfigSpec.singleNode", "spec.kairosConfigSpec.kubernetesVersion", "spec.rollout.strategy.type",
		"spec.rollout.strategy.rollingUpdate.maxSurge", "spec.machineNaming.template", "spec.kubeconfig.metadata.labels",
	} {
		if !covered[f] {
			t.Errorf("no failing case for %s", f)
		}
	}
	if n := len(invalidSpecs); n < 30 {
		t.Errorf("only %d failing cases", n)
	}
}
