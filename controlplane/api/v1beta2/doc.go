// Package v1beta2 will hold the KairosControlPlane API (controlplane.cluster.x-k8s.io/v1beta2).
package v1beta2
