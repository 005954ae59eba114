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

	// spec is the KairosConfig spec.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.singleNode) || !self.singleNode || (has(self.role) && self.role == 'control-plane')",message="only control-plane nodes can be single-node: remove singleNode or set role: control-plane",fieldPath=".singleNode",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!(has(self.role) && self.role == 'control-plane') || !has(self.workerToken) || size(self.workerToken) == 0",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".workerToken",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!(has(self.role) && self.role == 'control-plane') || !has(self.workerTokenSecretRef)",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".workerTokenSecretRef",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!has(self.manifests) || size(self.manifests) == 0 || (has(self.role) && self.role == 'control-plane')",message="manifests are applied by the control plane: move them to the control-plane KairosConfig (or KairosControlPlane)",fieldPath=".manifests",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!has(self.k0s) || !has(self.k0s.config) || size(self.k0s.config) == 0 || (has(self.role) && self.role == 'control-plane')",message="the k0s ClusterConfig is read by controllers only: remove it from worker configs",fieldPath=".k0s.config",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!has(self.virtualIP) || (has(self.role) && self.role == 'control-plane')",message="only control-plane nodes hold the virtual IP: remove it from worker configs",fieldPath=".virtualIP",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!has(self.k0s) || !has(self.distribution) || self.distribution == 'k0s'",messageExpression="'k0s options do not apply to distribution ' + self.distribution + ': move them to spec.k3s or set distribution: k0s'",fieldPath=".k0s",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="!has(self.k3s) || (has(self.distribution) && self.distribution == 'k3s')",messageExpression="'k3s options do not apply to distribution ' + (has(self.distribution) ? self.distribution : 'k0s') + ': move them to spec.k0s or set distribution: k3s'",fieldPath=".k3s",reason="FieldValueForbidden"
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
