// Package v1beta2 contains the KairosControlPlane and KairosControlPlaneTemplate API: the
// Cluster API control-plane provider for Kairos nodes running k0s or k3s.
//
// The package holds types, defaulting and CEL validation rules only; it has no controller code
// and imports no module of the repository but the bootstrap API. The Go validation of the
// webhooks is in controlplane/validation.
//
// +kubebuilder:object:generate=true
// +groupName=controlplane.cluster.x-k8s.io
package v1beta2
