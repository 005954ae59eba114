package v1beta2

import (
	"k8s.io/apimachinery/pkg/util/intstr"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// Default fills the defaults of a KairosControlPlaneSpec. The embedded KairosConfigSpec is
// left as written: the controller derives each Machine's KairosConfig from it, and defaults
// are applied there, on both sides of every comparison.
func (s *KairosControlPlaneSpec) Default() {
	if s.Replicas == nil {
		r := DefaultReplicas
		s.Replicas = &r
	}
	if s.Distribution == "" {
		s.Distribution = bootstrapv1.DistributionK0s
	}
	s.Rollout.defaultStrategy()
	if s.Etcd.Snapshots != nil {
		s.Etcd.Snapshots.Default()
	}
}

// Default fills the defaults of a template's spec.
func (s *KairosControlPlaneTemplateResourceSpec) Default() {
	if s.Distribution == "" {
		s.Distribution = bootstrapv1.DistributionK0s
	}
	s.Rollout.defaultStrategy()
	if s.Etcd.Snapshots != nil {
		s.Etcd.Snapshots.Default()
	}
}

func (r *KairosControlPlaneRolloutSpec) defaultStrategy() {
	if r.Strategy.Type == "" {
		r.Strategy.Type = RollingUpdateStrategyType
	}
	if r.Strategy.RollingUpdate.MaxSurge == nil {
		surge := intstr.FromInt32(DefaultMaxSurge)
		r.Strategy.RollingUpdate.MaxSurge = &surge
	}
}
