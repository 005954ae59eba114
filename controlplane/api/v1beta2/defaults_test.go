package v1beta2_test

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func surge(v int32) *intstr.IntOrString { s := intstr.FromInt32(v); return &s }

func TestDefault(t *testing.T) {
	tests := []struct {
		name string
		in   controlplanev1.KairosControlPlaneSpec
		want func(*testing.T, controlplanev1.KairosControlPlaneSpec)
	}{
		{
			name: "empty spec",
			want: func(t *testing.T, s controlplanev1.KairosControlPlaneSpec) {
				if s.Replicas == nil || *s.Replicas != 1 {
					t.Errorf("replicas = %v, want 1", s.Replicas)
				}
				if s.Distribution != bootstrapv1.DistributionK0s {
					t.Errorf("distribution = %q, want k0s", s.Distribution)
				}
				if s.Rollout.Strategy.Type != controlplanev1.RollingUpdateStrategyType {
					t.Errorf("rollout.strategy.type = %q, want RollingUpdate", s.Rollout.Strategy.Type)
				}
				if got := s.Rollout.Strategy.RollingUpdate.MaxSurge; got == nil || *got != intstr.FromInt32(1) {
					t.Errorf("maxSurge = %v, want integer 1", got)
				}
			},
		},
		{
			name: "set values are kept",
			in: controlplanev1.KairosControlPlaneSpec{
				Replicas:     ptr.To[int32](3),
				Distribution: bootstrapv1.DistributionK3s,
				Rollout: controlplanev1.KairosControlPlaneRolloutSpec{Strategy: controlplanev1.KairosControlPlaneRolloutStrategy{
					Type: "Recreate", RollingUpdate: controlplanev1.KairosControlPlaneRollingUpdate{MaxSurge: surge(0)},
				}},
			},
			want: func(t *testing.T, s controlplanev1.KairosControlPlaneSpec) {
				if *s.Replicas != 3 || s.Distribution != bootstrapv1.DistributionK3s {
					t.Errorf("replicas/distribution overwritten: %d %s", *s.Replicas, s.Distribution)
				}
				// Defaulting never hides a bad value from validation.
				if s.Rollout.Strategy.Type != "Recreate" {
					t.Errorf("rollout.strategy.type overwritten: %q", s.Rollout.Strategy.Type)
				}
				if *s.Rollout.Strategy.RollingUpdate.MaxSurge != intstr.FromInt32(0) {
					t.Errorf("maxSurge overwritten: %v", s.Rollout.Strategy.RollingUpdate.MaxSurge)
				}
			},
		},
		{
			name: "string maxSurge kept",
			in: controlplanev1.KairosControlPlaneSpec{Rollout: controlplanev1.KairosControlPlaneRolloutSpec{Strategy: controlplanev1.KairosControlPlaneRolloutStrategy{
				RollingUpdate: controlplanev1.KairosControlPlaneRollingUpdate{MaxSurge: ptr.To(intstr.FromString("1"))},
			}}},
			want: func(t *testing.T, s controlplanev1.KairosControlPlaneSpec) {
				if *s.Rollout.Strategy.RollingUpdate.MaxSurge != intstr.FromString("1") {
					t.Errorf("maxSurge = %v", s.Rollout.Strategy.RollingUpdate.MaxSurge)
				}
				if s.Rollout.Strategy.Type != controlplanev1.RollingUpdateStrategyType {
					t.Errorf("type not defaulted next to a set maxSurge: %q", s.Rollout.Strategy.Type)
				}
			},
		},
		{
			name: "embedded KairosConfigSpec left as written",
			in:   controlplanev1.KairosControlPlaneSpec{KairosConfigSpec: bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "hi"}}}},
			want: func(t *testing.T, s controlplanev1.KairosControlPlaneSpec) {
				want := bootstrapv1.KairosConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "hi"}}}
				if !reflect.DeepEqual(s.KairosConfigSpec, want) {
					t.Errorf("kairosConfigSpec changed by Default: %+v", s.KairosConfigSpec)
				}
			},
		},
		{
			name: "other fields untouched",
			in: controlplanev1.KairosControlPlaneSpec{
				Version:              "v1.31.2",
				KairosConfigTemplate: &controlplanev1.KairosConfigTemplateReference{Name: "cp"},
			},
			want: func(t *testing.T, s controlplanev1.KairosControlPlaneSpec) {
				if s.Version != "v1.31.2" || s.KairosConfigTemplate.Name != "cp" {
					t.Errorf("fields changed: %+v", s)
				}
				if !reflect.ValueOf(s.Remediation).IsZero() || !reflect.ValueOf(s.MachineNaming).IsZero() || !reflect.ValueOf(s.Kubeconfig).IsZero() {
					t.Errorf("remediation, machineNaming or kubeconfig defaulted; the controller applies their defaults: %+v", s)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := *tc.in.DeepCopy()
			s.Default()
			tc.want(t, s)

			// Idempotent: a second round (every webhook call on update) changes nothing.
			again := s.DeepCopy()
			again.Default()
			if !equality.Semantic.DeepEqual(&s, again) {
				t.Errorf("Default is not idempotent:\nonce:  %+v\ntwice: %+v", s, *again)
			}
		})
	}
}

func TestTemplateDefault(t *testing.T) {
	var s controlplanev1.KairosControlPlaneTemplateResourceSpec
	s.Default()
	if s.Distribution != bootstrapv1.DistributionK0s {
		t.Errorf("distribution = %q, want k0s", s.Distribution)
	}
	if s.Rollout.Strategy.Type != controlplanev1.RollingUpdateStrategyType {
		t.Errorf("rollout.strategy.type = %q", s.Rollout.Strategy.Type)
	}
	if got := s.Rollout.Strategy.RollingUpdate.MaxSurge; got == nil || *got != intstr.FromInt32(1) {
		t.Errorf("maxSurge = %v, want 1", got)
	}
	again := s.DeepCopy()
	again.Default()
	if !equality.Semantic.DeepEqual(&s, again) {
		t.Errorf("template Default is not idempotent")
	}

	k3s := controlplanev1.KairosControlPlaneTemplateResourceSpec{Distribution: bootstrapv1.DistributionK3s}
	k3s.Default()
	if k3s.Distribution != bootstrapv1.DistributionK3s {
		t.Errorf("distribution overwritten: %q", k3s.Distribution)
	}
}

// TestDefaultsMatchConstants keeps the documented defaults and the code in step.
func TestDefaultsMatchConstants(t *testing.T) {
	if controlplanev1.DefaultReplicas != 1 || controlplanev1.DefaultMaxSurge != 1 {
		t.Errorf("defaults changed: replicas %d, maxSurge %d", controlplanev1.DefaultReplicas, controlplanev1.DefaultMaxSurge)
	}
	if controlplanev1.DefaultMachineNamingTemplate != "{{ .kairosControlPlane.name }}-{{ .random }}" {
		t.Errorf("default naming template: %q", controlplanev1.DefaultMachineNamingTemplate)
	}
}
