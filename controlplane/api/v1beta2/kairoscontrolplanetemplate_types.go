package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// KairosControlPlaneTemplateSpec is the KairosControlPlane a ClusterClass stamps out.
type KairosControlPlaneTemplateSpec struct {
	// template is the KairosControlPlane to create.
	// +required
	Template KairosControlPlaneTemplateResource `json:"template,omitzero"`
}

// KairosControlPlaneTemplateResource is the metadata and spec of the KairosControlPlane created
// from a template.
type KairosControlPlaneTemplateResource struct {
	// metadata is copied to the KairosControlPlane.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the KairosControlPlane. replicas, version and the infrastructure template come
	// from the Cluster's topology.
	// +required
	Spec KairosControlPlaneTemplateResourceSpec `json:"spec,omitzero"`
}

// KairosControlPlaneTemplateResourceSpec is a KairosControlPlaneSpec without the fields a
// Cluster topology sets. It has the CEL rules of KairosControlPlaneSpec (embeddedConfigRules).
type KairosControlPlaneTemplateResourceSpec struct {
	// The CEL rules of kairosConfigSpec, as on KairosControlPlaneSpec (see embeddedConfigRules).
	embeddedConfigRules `json:",inline"`

	// distribution is the Kubernetes distribution: k0s (default) or k3s.
	// +optional
	Distribution bootstrapv1.Distribution `json:"distribution,omitempty"`

	// machineTemplate shapes the control-plane Machines.
	// +optional
	MachineTemplate KairosControlPlaneTemplateMachineTemplate `json:"machineTemplate,omitempty,omitzero"`

	// kairosConfigSpec is the KairosConfig spec of every control-plane Machine.
	// +optional
	KairosConfigSpec bootstrapv1.KairosConfigSpec `json:"kairosConfigSpec,omitempty,omitzero"`

	// kairosConfigTemplate references a KairosConfigTemplate used instead of kairosConfigSpec.
	// +optional
	KairosConfigTemplate *KairosConfigTemplateReference `json:"kairosConfigTemplate,omitempty"`

	// rollout configures how control-plane Machines are replaced.
	// +optional
	Rollout KairosControlPlaneRolloutSpec `json:"rollout,omitempty,omitzero"`

	// remediation configures how unhealthy Machines are replaced.
	// +optional
	Remediation KairosControlPlaneRemediationSpec `json:"remediation,omitempty,omitzero"`

	// machineNaming configures the names of control-plane Machines.
	// +optional
	MachineNaming MachineNamingSpec `json:"machineNaming,omitempty,omitzero"`

	// kubeconfig configures the <cluster>-kubeconfig Secret.
	// +optional
	Kubeconfig KairosControlPlaneKubeconfigSpec `json:"kubeconfig,omitempty,omitzero"`

	// etcd configures the etcd of the control plane: snapshots to an S3-compatible store.
	// +optional
	Etcd KairosControlPlaneEtcdSpec `json:"etcd,omitempty,omitzero"`
}

// KairosControlPlaneTemplateMachineTemplate shapes the control-plane Machines of a template.
type KairosControlPlaneTemplateMachineTemplate struct {
	// metadata is propagated to the Machines.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the control-plane Machines.
	// +optional
	Spec KairosControlPlaneTemplateMachineTemplateSpec `json:"spec,omitempty,omitzero"`
}

// KairosControlPlaneTemplateMachineTemplateSpec is the Machine spec of a template.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneTemplateMachineTemplateSpec struct {
	// readinessGates are extra conditions a Machine's Ready condition includes.
	// +optional
	// +listType=map
	// +listMapKey=conditionType
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	ReadinessGates []clusterv1.MachineReadinessGate `json:"readinessGates,omitempty"`

	// deletion configures Machine deletion.
	// +optional
	Deletion KairosControlPlaneMachineTemplateDeletionSpec `json:"deletion,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairoscontrolplanetemplates,scope=Namespaced,categories=cluster-api,shortName=kairoscpt
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Distribution",type="string",JSONPath=".spec.template.spec.distribution",description="Kubernetes distribution"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosControlPlaneTemplate is a template for KairosControlPlanes, used by ClusterClasses.
type KairosControlPlaneTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template.
	// +required
	Spec KairosControlPlaneTemplateSpec `json:"spec,omitzero"`
}

// +kubebuilder:object:root=true

// KairosControlPlaneTemplateList is a list of KairosControlPlaneTemplate.
type KairosControlPlaneTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of KairosControlPlaneTemplates.
	Items []KairosControlPlaneTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosControlPlaneTemplate{}, &KairosControlPlaneTemplateList{})
}
