package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// KairosSimMachineSpec is the desired state of a simulated Kairos machine.
type KairosSimMachineSpec struct {
	// providerID is set by the controller once the machine exists, in the form
	// providerIDConvention says. The simulated node does not know it: its Node gets whatever
	// provider ID its bootstrap data and distribution give it, as a real node's does.
	// NOTE: part of the Cluster API contract.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// providerIDConvention is the infrastructure provider whose provider IDs the machine gets:
	// Simulation (kairos-sim://<namespace>/<name>), VSphere (vsphere://<BIOS UUID>), Proxmox
	// (proxmox://<SMBIOS UUID>), KubeVirt (kubevirt://<VM name>) or Metal3
	// (metal3://<namespace>/<BareMetalHost>/<Metal3Machine>). The machine's DMI product UUID is
	// what the vSphere and Proxmox forms carry.
	// +optional
	// +kubebuilder:validation:Enum=Simulation;VSphere;Proxmox;KubeVirt;Metal3
	ProviderIDConvention ProviderIDConvention `json:"providerIDConvention,omitempty"`

	// failureDomain the machine is placed in (deprecated by the v1beta2 contract in favour of
	// the Machine's spec.failureDomain, which takes precedence).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// installedVersion is the distribution version the machine's image ships, as
	// `k0s version` or `k3s --version` would print it (for example v1.31.2+k0s.0). When it does
	// not match the version the bootstrap data requires, the node refuses to start the
	// distribution, as the real preflight check does. Empty: the image ships what is required.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	InstalledVersion string `json:"installedVersion,omitempty"`
}

// ProviderIDConvention names the form of a real infrastructure provider's provider IDs.
type ProviderIDConvention string

// The provider ID conventions the simulation models, each as its provider writes it: CAPV
// (vsphere:// + the VM's BIOS UUID, pkg/util ConvertUUIDToProviderID), CAPMOX (proxmox:// + the
// VM's SMBIOS UUID, pkg/provider GetProviderIDFromUUID), CAPK (kubevirt:// + the VM name) and
// CAPM3 (metal3://<namespace>/<BareMetalHost>/<Metal3Machine>).
const (
	ProviderIDSimulation ProviderIDConvention = "Simulation"
	ProviderIDVSphere    ProviderIDConvention = "VSphere"
	ProviderIDProxmox    ProviderIDConvention = "Proxmox"
	ProviderIDKubeVirt   ProviderIDConvention = "KubeVirt"
	ProviderIDMetal3     ProviderIDConvention = "Metal3"
)

// KairosSimMachineStatus is the observed state of a KairosSimMachine.
type KairosSimMachineStatus struct {
	// conditions: Ready, Provisioned, BootstrapSucceeded and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization provides observations of the machine initialization.
	// NOTE: part of the Cluster API contract.
	// +optional
	Initialization KairosSimMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// addresses of the machine.
	// NOTE: part of the Cluster API contract.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain the machine was placed in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// nodeName is the name the simulated node registers (its hostname).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// nodePhase is the simulated node's phase: Booting, Running, Refused or Stopped.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	NodePhase string `json:"nodePhase,omitempty"`

	// observedGeneration is the latest generation observed by the controller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// KairosSimMachineInitializationStatus provides observations of the machine initialization.
// +kubebuilder:validation:MinProperties=1
type KairosSimMachineInitializationStatus struct {
	// provisioned is true once the machine exists and was handed its bootstrap data.
	// NOTE: part of the Cluster API contract.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairossimmachines,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName",description="Node name"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.nodePhase",description="Node phase"
// +kubebuilder:printcolumn:name="Provider ID",type="string",JSONPath=".spec.providerID",description="Provider ID"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KairosSimMachine is a simulated Kairos machine: it hands its Machine's bootstrap data to a
// simulated node that behaves like a real Kairos node from the outside.
type KairosSimMachine struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec KairosSimMachineSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status KairosSimMachineStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions; used by Cluster API's condition helpers.
func (m *KairosSimMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions; used by Cluster API's condition helpers.
func (m *KairosSimMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KairosSimMachineList is a list of KairosSimMachines.
type KairosSimMachineList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KairosSimMachine `json:"items"`
}

// KairosSimMachineTemplateSpec is the spec of a KairosSimMachineTemplate.
type KairosSimMachineTemplateSpec struct {
	// template is the KairosSimMachine to create for each Machine.
	// +required
	Template KairosSimMachineTemplateResource `json:"template"`
}

// KairosSimMachineTemplateResource is the metadata and spec of the KairosSimMachines created
// from a template.
type KairosSimMachineTemplateResource struct {
	// metadata is copied to every KairosSimMachine.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the KairosSimMachines.
	// +optional
	Spec KairosSimMachineSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairossimmachinetemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion

// KairosSimMachineTemplate is a template for the KairosSimMachines of a set of Machines.
type KairosSimMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec KairosSimMachineTemplateSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// KairosSimMachineTemplateList is a list of KairosSimMachineTemplates.
type KairosSimMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KairosSimMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes,
		&KairosSimMachine{}, &KairosSimMachineList{},
		&KairosSimMachineTemplate{}, &KairosSimMachineTemplateList{})
}
