package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// KairosSimClusterSpec is the desired state of a simulated cluster's infrastructure.
// +kubebuilder:validation:XValidation:rule="!(has(self.loadBalancer) && has(self.virtualIP) && self.virtualIP)",message="a virtual IP endpoint has no load balancer: set loadBalancer or virtualIP, not both"
type KairosSimClusterSpec struct {
	// controlPlaneEndpoint is where the workload API server of the simulated cluster listens.
	// The controller allocates 127.0.0.1:<free TCP port> once when it is empty.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// failureDomains are published in status.failureDomains, so that Machine placement can be
	// tested.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	FailureDomains []KairosSimFailureDomain `json:"failureDomains,omitempty"`

	// loadBalancer, when set, makes the endpoint a load balancer that forwards to another port
	// on the control-plane nodes, the way a cloud load balancer listening on 443 forwards to
	// 6443: a control-plane node whose API server does not listen on backendPort is never
	// reached through the endpoint. Unset: the nodes serve the endpoint's port themselves.
	// +optional
	LoadBalancer *KairosSimLoadBalancer `json:"loadBalancer,omitempty"`

	// virtualIP, when true, puts no load balancer in front of the control plane: the endpoint
	// is a virtual IP the control-plane nodes hold among themselves, as on vSphere, Metal3 or
	// Proxmox without one. It answers only while a running control-plane node whose bootstrap
	// data makes it hold the address (k0s keepalived, kube-vip) holds it; when the holder goes
	// away another such node takes over, and without one nothing answers.
	// +optional
	VirtualIP bool `json:"virtualIP,omitempty"`
}

// KairosSimLoadBalancer is the load balancer in front of a simulated cluster's API servers.
type KairosSimLoadBalancer struct {
	// backendPort is the port the load balancer forwards the endpoint to on every
	// control-plane node.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	BackendPort int32 `json:"backendPort"`
}

// KairosSimFailureDomain is one failure domain of a simulated cluster.
type KairosSimFailureDomain struct {
	// name of the failure domain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// controlPlane tells whether control-plane Machines may be placed in this domain.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// attributes are free-form details of the domain.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// KairosSimClusterStatus is the observed state of a KairosSimCluster.
type KairosSimClusterStatus struct {
	// conditions: Ready, Provisioned and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization provides observations of the infrastructure initialization.
	// NOTE: part of the Cluster API contract.
	// +optional
	Initialization KairosSimClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// failureDomains the cluster's Machines can be placed in.
	// NOTE: part of the Cluster API contract.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// observedGeneration is the latest generation observed by the controller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// KairosSimClusterInitializationStatus provides observations of the infrastructure
// initialization.
// +kubebuilder:validation:MinProperties=1
type KairosSimClusterInitializationStatus struct {
	// provisioned is true once the control-plane endpoint is allocated.
	// NOTE: part of the Cluster API contract.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairossimclusters,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.port",description="Endpoint port"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="Provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// KairosSimCluster is the infrastructure of a simulated Kairos cluster: an endpoint on the
// loopback interface where the cluster's workload API server listens.
type KairosSimCluster struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec KairosSimClusterSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status KairosSimClusterStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions; used by Cluster API's condition helpers.
func (c *KairosSimCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions; used by Cluster API's condition helpers.
func (c *KairosSimCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KairosSimClusterList is a list of KairosSimClusters.
type KairosSimClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KairosSimCluster `json:"items"`
}

// KairosSimClusterTemplateSpec is the spec of a KairosSimClusterTemplate.
type KairosSimClusterTemplateSpec struct {
	// template is the KairosSimCluster to create.
	// +required
	Template KairosSimClusterTemplateResource `json:"template"`
}

// KairosSimClusterTemplateResource is the metadata and spec of the KairosSimClusters created
// from a template.
type KairosSimClusterTemplateResource struct {
	// metadata is copied to the KairosSimCluster.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the KairosSimCluster.
	// +optional
	Spec KairosSimClusterSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairossimclustertemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion

// KairosSimClusterTemplate is a template for KairosSimClusters (ClusterClass).
type KairosSimClusterTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec KairosSimClusterTemplateSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// KairosSimClusterTemplateList is a list of KairosSimClusterTemplates.
type KairosSimClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KairosSimClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes,
		&KairosSimCluster{}, &KairosSimClusterList{},
		&KairosSimClusterTemplate{}, &KairosSimClusterTemplateList{})
}
