// Package v1beta2 contains the KairosConfig and KairosConfigTemplate API: the Cluster API
// bootstrap provider that renders Kairos cloud-config for k0s and k3s nodes.
//
// The package holds types, defaulting and CEL validation rules only; it has no controller code
// and imports no other module of the repository, so that the control-plane provider and other
// consumers can import it without pulling controllers or the renderer in. The Go validation of
// the webhooks is in common/provider/validation.
//
// +kubebuilder:object:generate=true
// +groupName=bootstrap.cluster.x-k8s.io
package v1beta2
