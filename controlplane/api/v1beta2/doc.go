// Package v1beta2 contains the KairosControlPlane and KairosControlPlaneTemplate API: the
// Cluster API control-plane provider for Kairos nodes running k0s or k3s.
//
// The package holds types, defaulting and validation only; it has no controller code.
//
// +kubebuilder:object:generate=true
// +groupName=controlplane.cluster.x-k8s.io
package v1beta2
