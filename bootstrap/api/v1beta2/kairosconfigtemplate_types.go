package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// KairosConfigTemplateSpec defines the KairosConfig stamped out for each Machine.
type KairosConfigTemplateSpec struct {
	// template is the KairosConfig to create for each Machine.
	// +required
	Template KairosConfigTemplateResource `json:"template,omitempty,omitzero"`
}

// KairosConfigTemplateResource is the metadata and spec of the KairosConfigs created from a template.
type KairosConfigTemplateResource struct {
	// metadata is copied to every KairosConfig created from the template.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// The CEL rules of a node's spec, as on KairosConfig (see nodeSpecRules).
	nodeSpecRules `json:",inline"`

	// spec is the KairosConfig spec.
	// +optional
	Spec KairosConfigSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairosconfigtemplates,scope=Namespaced,categories=cluster-api,shortName=kct;kcfgt
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Role",type="string",JSONPath=".spec.template.spec.role",description="Node role"
// +kubebuilder:printcolumn:name="Distribution",type="string",JSONPath=".spec.template.spec.distribution",description="Kubernetes distribution"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosConfigTemplate is a template for the KairosConfigs of a set of Machines.
type KairosConfigTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template.
	// +optional
	Spec KairosConfigTemplateSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// KairosConfigTemplateList is a list of KairosConfigTemplate.
type KairosConfigTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of KairosConfigTemplates.
	Items []KairosConfigTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosConfigTemplate{}, &KairosConfigTemplateList{})
}
