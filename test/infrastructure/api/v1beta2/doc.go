// Package v1beta2 is the API of the Kairos simulation infrastructure provider used by the
// lifecycle tests: KairosSimCluster and KairosSimMachine (and their templates) and
// KairosSimMachinePool, compliant with the Cluster API v1beta2 infrastructure contracts.
//
// The package holds types only; the controllers live in
// github.com/kairos-capi/kairos-capi/test/infrastructure/controllers.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1beta2
