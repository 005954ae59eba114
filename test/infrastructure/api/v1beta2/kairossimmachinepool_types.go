package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// KairosSimMachinePool follows Cluster API's v1beta2 InfraMachinePool contract
// (docs/book/src/developer/providers/contracts/infra-machinepool.md of cluster-api v1.14):
// spec.providerIDList, status.replicas and status.initialization.provisioned are mandatory,
// conditions and instances optional. It does not opt in to MachinePool Machines (no
// status.infrastructureMachineKind): like a cloud's scaling group, the pool owns its instances
// and Cluster API sees them through the provider ID list only.

// KairosSimMachinePoolSpec is the desired state of a pool of simulated Kairos machines. The
// number of machines is the owning MachinePool's spec.replicas.
type KairosSimMachinePoolSpec struct {
	// providerIDList are the provider IDs (kairos-sim://<namespace>/<instance>) of the pool's
	// running machines, set by the controller.
	// NOTE: part of the Cluster API contract.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ProviderIDList []string `json:"providerIDList,omitempty"`

	// installedVersion is the distribution version the pool's image ships, as on
	// KairosSimMachine. Empty: the image ships what the bootstrap data requires.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	InstalledVersion string `json:"installedVersion,omitempty"`
}

// KairosSimMachinePoolStatus is the observed state of a KairosSimMachinePool.
type KairosSimMachinePoolStatus struct {
	// conditions: Ready, Provisioned, BootstrapSucceeded and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization provides observations of the pool initialization.
	// NOTE: part of the Cluster API contract.
	// +optional
	Initialization KairosSimMachinePoolInitializationStatus `json:"initialization,omitempty,omitzero"`

	// ready mirrors initialization.provisioned for the deprecated v1beta1 contract, which the
	// MachinePool controller of Cluster API v1.14 still reads (external.IsReady reads
	// status.ready only).
	// +optional
	Ready *bool `json:"ready,omitempty"`

	// replicas is the number of machines of the pool that run (were started and not stopped).
	// NOTE: part of the Cluster API contract.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// instances describe the pool's running machines.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	Instances []KairosSimMachinePoolInstance `json:"instances,omitempty"`

	// observedGeneration is the latest generation observed by the controller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// KairosSimMachinePoolInstance is one machine of a pool.
type KairosSimMachinePoolInstance struct {
	// instanceName identifies the machine in the pool; the node registers with it as its name
	// when the bootstrap data sets no hostname.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	InstanceName string `json:"instanceName"`

	// providerID of the machine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID"`

	// addresses of the machine.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// nodeName is the name the node registers (its hostname).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// nodePhase is the simulated node's phase: Booting, Running or Refused.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	NodePhase string `json:"nodePhase,omitempty"`

	// reason and message are what the node reports about its bootstrap.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=10240
	Message string `json:"message,omitempty"`

	// bootstrapped is true once the node wrote the Cluster API bootstrap sentinel.
	// +optional
	Bootstrapped bool `json:"bootstrapped,omitempty"`
}

// KairosSimMachinePoolInitializationStatus provides observations of the pool initialization.
// +kubebuilder:validation:MinProperties=1
type KairosSimMachinePoolInitializationStatus struct {
	// provisioned is true once the pool was handed its bootstrap data and started its machines.
	// NOTE: part of the Cluster API contract.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairossimmachinepools,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="Running machines"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="Provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KairosSimMachinePool is a pool of simulated Kairos machines: it hands its MachinePool's
// bootstrap data to one simulated node per replica.
type KairosSimMachinePool struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec KairosSimMachinePoolSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status KairosSimMachinePoolStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions; used by Cluster API's condition helpers.
func (p *KairosSimMachinePool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions; used by Cluster API's condition helpers.
func (p *KairosSimMachinePool) SetConditions(conditions []metav1.Condition) {
	p.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KairosSimMachinePoolList is a list of KairosSimMachinePools.
type KairosSimMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KairosSimMachinePool `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosSimMachinePool{}, &KairosSimMachinePoolList{})
}
