package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// Labels and annotations the control plane sets on the objects it manages.
const (
	// ControlPlaneNameLabel names the KairosControlPlane a Machine belongs to.
	ControlPlaneNameLabel = "cluster.x-k8s.io/control-plane-name"

	// EtcdMemberHookAnnotation is the pre-terminate hook that holds a control-plane Machine's
	// deletion until its etcd member has left the cluster.
	EtcdMemberHookAnnotation = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/kairos-etcd-member"

	// RemediationForAnnotation on a replacement Machine records the remediation it is part of.
	RemediationForAnnotation = "controlplane.cluster.x-k8s.io/remediation-for"

	// RemediationInProgressAnnotation on the KairosControlPlane records an unfinished remediation.
	RemediationInProgressAnnotation = "controlplane.cluster.x-k8s.io/remediation-in-progress"

	// EtcdSnapshotRequestAnnotation on a KairosControlPlane with spec.etcd.snapshots asks every
	// control-plane node for one on-demand etcd snapshot per new value (a timestamp, say: 1-63
	// letters, digits, '.', '_', ':' or '-'). Nodes never call the management cluster: the control
	// plane hands the value to the workload cluster (ConfigMap
	// kube-system/kairos-capi-etcd-snapshot-request), which each node reads once a minute, and
	// echoes it in status.etcd.snapshotRequest (docs/backups.md, "On demand").
	EtcdSnapshotRequestAnnotation = "controlplane.cluster.x-k8s.io/etcd-snapshot-request"

	// ReleaseAnnotation on the control-plane provider's CRDs names the provider release that
	// installed them (vX.Y.Z); release builds stamp it, like bootstrapv1.ReleaseAnnotation.
	ReleaseAnnotation = "controlplane.cluster.x-k8s.io/kairos-release"
)

// RolloutStrategyType is the kind of rollout.
// +kubebuilder:validation:Enum=RollingUpdate
type RolloutStrategyType string

// RollingUpdateStrategyType replaces Machines one at a time.
const RollingUpdateStrategyType RolloutStrategyType = "RollingUpdate"

// Defaults applied by the KairosControlPlane webhook.
const (
	DefaultReplicas = int32(1)
	DefaultMaxSurge = 1
	// DefaultClientCertificateValiditySeconds is one year, as kubeadm's control plane: every
	// rotation makes Cluster API's ClusterCache reconnect to the workload cluster.
	DefaultClientCertificateValiditySeconds = int32(365 * 24 * 60 * 60)
	DefaultMachineNamingTemplate            = "{{ .kairosControlPlane.name }}-{{ .random }}"
)

// embeddedConfigRules holds the CEL rules of the kairosConfigSpec of a KairosControlPlane and of
// a KairosControlPlaneTemplate's spec: the control plane sets the role, distribution,
// single-node mode and version of every Machine's KairosConfig, so the rules refuse other
// values of them in kairosConfigSpec, worker tokens, and the options of the other distribution
// (an unset distribution is k0s), in the webhook's words, so that they hold without the
// webhook; the webhook checks them too (controlplane/validation), with the rules CEL cannot
// express.
//
// KairosControlPlaneSpec and KairosControlPlaneTemplateResourceSpec embed this type inline so
// that the rules are written once: controller-gen merges the type-level rules of an inline
// field into the schema of the embedding type, where self is that spec, as if they were written
// on it. It has no fields, so it changes neither the JSON nor the Go literals of either type.
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.role) || self.kairosConfigSpec.role == 'control-plane'",message="control-plane Machines have role control-plane: remove it",fieldPath=".kairosConfigSpec.role"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.distribution) || self.kairosConfigSpec.distribution == (has(self.distribution) ? self.distribution : 'k0s')",messageExpression="'differs from spec.distribution ' + (has(self.distribution) ? self.distribution : 'k0s') + ': remove it, the control plane sets it'",fieldPath=".kairosConfigSpec.distribution"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.singleNode) || !self.kairosConfigSpec.singleNode",message="the control plane sets single-node mode itself when replicas is 1: remove it",fieldPath=".kairosConfigSpec.singleNode",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.kubernetesVersion) || size(self.kairosConfigSpec.kubernetesVersion) == 0",message="the control plane's spec.version applies: remove it",fieldPath=".kairosConfigSpec.kubernetesVersion",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.workerToken) || size(self.kairosConfigSpec.workerToken) == 0",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".kairosConfigSpec.workerToken",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.workerTokenSecretRef)",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".kairosConfigSpec.workerTokenSecretRef",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.k0s) || !has(self.distribution) || self.distribution == 'k0s'",messageExpression="'k0s options do not apply to distribution ' + self.distribution + ': move them to spec.k3s or set distribution: k0s'",fieldPath=".kairosConfigSpec.k0s",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.k3s) || (has(self.distribution) && self.distribution == 'k3s')",messageExpression="'k3s options do not apply to distribution ' + (has(self.distribution) ? self.distribution : 'k0s') + ': move them to spec.k0s or set distribution: k3s'",fieldPath=".kairosConfigSpec.k3s",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.kairosConfigSpec) || !has(self.kairosConfigSpec.etcdSnapshots)",message="the control plane sets it from spec.etcd.snapshots: move it there",fieldPath=".kairosConfigSpec.etcdSnapshots",reason="FieldValueForbidden"
type embeddedConfigRules struct{}

// KairosControlPlaneSpec is the desired state of a Kairos control plane.
//
// The control plane sets the role, distribution, single-node mode and version of every
// Machine's KairosConfig: the CEL rules of embeddedConfigRules refuse other values of them in
// kairosConfigSpec.
type KairosControlPlaneSpec struct {
	// The CEL rules of kairosConfigSpec (see embeddedConfigRules).
	embeddedConfigRules `json:",inline"`

	// replicas is the number of control-plane Machines, each an etcd member. Defaults to 1.
	// Must be odd: an even number tolerates no more failures than the odd number below it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Replicas *int32 `json:"replicas,omitempty"`

	// version is the Kubernetes version of the control plane, for example v1.31.2. Changing it
	// rolls the control plane one minor version at a time.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version"`

	// distribution is the Kubernetes distribution of the Kairos images: k0s (default) or k3s.
	// It cannot change once set.
	// +optional
	Distribution bootstrapv1.Distribution `json:"distribution,omitempty"`

	// machineTemplate shapes the control-plane Machines.
	// +required
	MachineTemplate KairosControlPlaneMachineTemplate `json:"machineTemplate,omitzero"`

	// kairosConfigSpec is the KairosConfig spec of every control-plane Machine. The provider
	// sets role, distribution and single-node mode itself. Mutually exclusive with
	// kairosConfigTemplate.
	// +optional
	KairosConfigSpec bootstrapv1.KairosConfigSpec `json:"kairosConfigSpec,omitempty,omitzero"`

	// kairosConfigTemplate references a KairosConfigTemplate in the same namespace whose spec
	// is used instead of kairosConfigSpec. Pointing it at a template with another spec rolls the
	// control plane.
	// +optional
	KairosConfigTemplate *KairosConfigTemplateReference `json:"kairosConfigTemplate,omitempty"`

	// rollout configures how control-plane Machines are replaced.
	// +optional
	Rollout KairosControlPlaneRolloutSpec `json:"rollout,omitempty,omitzero"`

	// remediation configures how Machines a MachineHealthCheck marks unhealthy are replaced.
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

// KairosControlPlaneEtcdSpec configures the control plane's etcd.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneEtcdSpec struct {
	// snapshots makes every control-plane node take snapshots of its etcd member on a
	// schedule and before every in-place upgrade, and upload them to an S3-compatible store,
	// named by cluster and node (docs/backups.md). The control plane sets it on the
	// KairosConfig of every control-plane Machine: changing it rolls the control plane. The
	// credentials come from a Secret, never inline.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.restore)",message="the control plane sets restore itself, on the replacement of its last Machine: remove it",fieldPath=".restore",reason="FieldValueForbidden"
	Snapshots *bootstrapv1.EtcdSnapshots `json:"snapshots,omitempty"`
}

// KairosConfigTemplateReference names a KairosConfigTemplate in the same namespace.
type KairosConfigTemplateReference struct {
	// name of the KairosConfigTemplate.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KairosControlPlaneMachineTemplate shapes the control-plane Machines.
type KairosControlPlaneMachineTemplate struct {
	// metadata is propagated to the Machines (and through them to the Nodes) without a rollout.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the control-plane Machines.
	// +required
	Spec KairosControlPlaneMachineTemplateSpec `json:"spec,omitzero"`
}

// KairosControlPlaneMachineTemplateSpec is the spec of the control-plane Machines.
type KairosControlPlaneMachineTemplateSpec struct {
	// infrastructureRef references the infrastructure machine template each Machine's
	// infrastructure machine is cloned from. Pointing it at another template rolls the control plane.
	// +required
	InfrastructureRef clusterv1.ContractVersionedObjectReference `json:"infrastructureRef,omitzero"`

	// readinessGates are extra conditions a Machine's Ready condition includes.
	// +optional
	// +listType=map
	// +listMapKey=conditionType
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	ReadinessGates []clusterv1.MachineReadinessGate `json:"readinessGates,omitempty"`

	// deletion configures Machine deletion; propagated to existing Machines without a rollout.
	// +optional
	Deletion KairosControlPlaneMachineTemplateDeletionSpec `json:"deletion,omitempty,omitzero"`
}

// KairosControlPlaneMachineTemplateDeletionSpec configures Machine deletion.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneMachineTemplateDeletionSpec struct {
	// nodeDrainTimeoutSeconds bounds the node drain; 0 means no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NodeDrainTimeoutSeconds *int32 `json:"nodeDrainTimeoutSeconds,omitempty"`

	// nodeVolumeDetachTimeoutSeconds bounds the wait for volumes to detach; 0 means no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NodeVolumeDetachTimeoutSeconds *int32 `json:"nodeVolumeDetachTimeoutSeconds,omitempty"`

	// nodeDeletionTimeoutSeconds bounds the deletion of the Node object; 0 retries forever.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NodeDeletionTimeoutSeconds *int32 `json:"nodeDeletionTimeoutSeconds,omitempty"`
}

// KairosControlPlaneRolloutSpec configures rollouts.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneRolloutSpec struct {
	// after rolls every Machine created before this time, even without a spec change.
	// +optional
	After metav1.Time `json:"after,omitempty,omitzero"`

	// strategy of the rollout.
	// +optional
	Strategy KairosControlPlaneRolloutStrategy `json:"strategy,omitempty,omitzero"`
}

// KairosControlPlaneRolloutStrategy is how Machines are replaced.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneRolloutStrategy struct {
	// type of the rollout. Only RollingUpdate is supported.
	// +optional
	Type RolloutStrategyType `json:"type,omitempty"`

	// rollingUpdate configures RollingUpdate.
	// +optional
	RollingUpdate KairosControlPlaneRollingUpdate `json:"rollingUpdate,omitempty,omitzero"`
}

// KairosControlPlaneRollingUpdate configures a rolling update.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneRollingUpdate struct {
	// maxSurge is how many Machines may exist above replicas during a rollout: 1 (default)
	// creates the replacement first; 0 removes a Machine first, for environments without
	// spare capacity (it needs at least 3 replicas to keep etcd quorum), or updates it in place
	// when Cluster API's InPlaceUpdates gate is on and an update extension can (also with 1
	// replica).
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
}

// KairosControlPlaneRemediationSpec limits remediation.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneRemediationSpec struct {
	// maxRetry is how many times a Machine and its replacements are remediated before
	// giving up. Unset means no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRetry *int32 `json:"maxRetry,omitempty"`

	// retryPeriodSeconds is the minimum time between two remediations of the same Machine's
	// replacements. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryPeriodSeconds *int32 `json:"retryPeriodSeconds,omitempty"`

	// minHealthyPeriodSeconds: a replacement healthy for longer than this resets the retry
	// count. Defaults to 3600.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinHealthyPeriodSeconds *int32 `json:"minHealthyPeriodSeconds,omitempty"`
}

// MachineNamingSpec configures Machine names.
// +kubebuilder:validation:MinProperties=1
type MachineNamingSpec struct {
	// template is a Go template for Machine names, with .cluster.name,
	// .kairosControlPlane.name and .random (5 random characters, required for uniqueness).
	// Defaults to "{{ .kairosControlPlane.name }}-{{ .random }}". A Machine's name is its
	// node's hostname: dots in the cluster and control-plane names become hyphens, and a name
	// over 63 characters is shortened keeping the random part.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Template string `json:"template,omitempty"`
}

// KairosControlPlaneKubeconfigSpec configures the <cluster>-kubeconfig Secret.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneKubeconfigSpec struct {
	// metadata adds labels and annotations to the kubeconfig Secret.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// clientCertificateValiditySeconds is the lifetime of the kubeconfig's client certificate;
	// it is rotated when half of it is left. Defaults to 31536000 (one year, rotated after six
	// months).
	// +optional
	// +kubebuilder:validation:Minimum=3600
	ClientCertificateValiditySeconds *int32 `json:"clientCertificateValiditySeconds,omitempty"`
}

// KairosControlPlaneStatus is the observed state of a Kairos control plane.
type KairosControlPlaneStatus struct {
	// conditions: Available, Initialized, CertificatesAvailable, MachinesReady,
	// MachinesUpToDate, RollingOut, ScalingUp, ScalingDown, Remediating, Deleting, Paused,
	// EtcdClusterHealthy, BootstrapProviderCompatible, and with spec.etcd.snapshots
	// EtcdSnapshotsUpToDate and (after a restore) EtcdRestored.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports when the control plane accepts requests.
	// NOTE: part of the Cluster API contract.
	// +optional
	Initialization KairosControlPlaneInitializationStatus `json:"initialization,omitempty,omitzero"`

	// selector selects the control-plane Machines (scale subresource).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Selector string `json:"selector,omitempty"`

	// replicas is the number of control-plane Machines.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of Machines whose Ready condition is true.
	// +optional
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`

	// availableReplicas is the number of Machines whose Available condition is true.
	// +optional
	AvailableReplicas *int32 `json:"availableReplicas,omitempty"`

	// upToDateReplicas is the number of Machines whose UpToDate condition is true.
	// +optional
	UpToDateReplicas *int32 `json:"upToDateReplicas,omitempty"`

	// versions lists the Kubernetes versions of the Machines, oldest first, with counts.
	// +optional
	// +listType=map
	// +listMapKey=version
	// +kubebuilder:validation:MaxItems=100
	Versions []clusterv1.StatusVersion `json:"versions,omitempty"`

	// version is the oldest Kubernetes version among the Machines.
	//
	// Deprecated: read versions; kept because Cluster API still reads it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// observedGeneration is the latest generation observed by the controller.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastRemediation describes the latest remediation.
	// +optional
	LastRemediation LastRemediationStatus `json:"lastRemediation,omitempty,omitzero"`

	// etcd reports the control plane's etcd snapshots (spec.etcd.snapshots).
	// +optional
	Etcd KairosControlPlaneEtcdStatus `json:"etcd,omitempty,omitzero"`
}

// KairosControlPlaneEtcdStatus reports the control plane's etcd snapshots.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneEtcdStatus struct {
	// snapshots are the newest snapshot in the store of each control-plane Machine's node, of
	// any kind, as the control plane last listed the store (at most every few minutes, with the
	// credentials of spec.etcd.snapshots). A Machine whose node has none is not listed.
	// +optional
	// +listType=map
	// +listMapKey=machine
	// +kubebuilder:validation:MaxItems=32
	Snapshots []EtcdSnapshotStatus `json:"snapshots,omitempty"`

	// snapshotRequest is the on-demand snapshot request (the etcd-snapshot-request annotation)
	// last handed to the control-plane nodes: each takes one on-demand snapshot for it within
	// about a minute. snapshots shows the newest of each node, of any kind: the on-demand one,
	// or a scheduled one taken after it.
	// +optional
	SnapshotRequest EtcdSnapshotRequestStatus `json:"snapshotRequest,omitempty,omitzero"`
}

// EtcdSnapshotRequestStatus is an on-demand snapshot request handed to the control-plane nodes.
type EtcdSnapshotRequestStatus struct {
	// value of the etcd-snapshot-request annotation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Value string `json:"value"`

	// time the control plane handed it to the workload cluster.
	// +required
	Time metav1.Time `json:"time,omitzero"`
}

// EtcdSnapshotStatus is a snapshot of a member in the store.
type EtcdSnapshotStatus struct {
	// machine is the control-plane Machine whose node took it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Machine string `json:"machine"`

	// node is the node that took it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`

	// name of the snapshot in the store: <cluster>-<node>-<unix time>, or with the kind first
	// (pre-upgrade-, on-demand-); k0s' end in .tar.gz.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Name string `json:"name"`

	// location is s3://<bucket>/<key>.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Location string `json:"location"`

	// time the snapshot was taken.
	// +required
	Time metav1.Time `json:"time,omitzero"`

	// sizeBytes is the snapshot's size in the store.
	// +required
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes"`
}

// KairosControlPlaneInitializationStatus reports the control plane's initialization.
// +kubebuilder:validation:MinProperties=1
type KairosControlPlaneInitializationStatus struct {
	// controlPlaneInitialized is true once the first control-plane node serves the API.
	// NOTE: part of the Cluster API contract.
	// +optional
	ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
}

// LastRemediationStatus describes the latest remediation.
type LastRemediationStatus struct {
	// machine is the Machine that was remediated.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Machine string `json:"machine"`

	// time the remediation started.
	// +required
	Time metav1.Time `json:"time,omitzero"`

	// retryCount counts the remediations of this Machine and the Machines it replaced.
	// +required
	// +kubebuilder:validation:Minimum=0
	RetryCount int32 `json:"retryCount"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairoscontrolplanes,scope=Namespaced,categories=cluster-api,shortName=kairoscp
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Distribution",type="string",JSONPath=".spec.distribution",description="Kubernetes distribution"
// +kubebuilder:printcolumn:name="Available",type="string",JSONPath=`.status.conditions[?(@.type=="Available")].status`,description="Available condition"
// +kubebuilder:printcolumn:name="Initialized",type="boolean",JSONPath=".status.initialization.controlPlaneInitialized",description="The control plane serves requests"
// +kubebuilder:printcolumn:name="Desired",type="integer",JSONPath=".spec.replicas",description="Desired replicas"
// +kubebuilder:printcolumn:name="Current",type="integer",JSONPath=".status.replicas",description="Machines"
// +kubebuilder:printcolumn:name="Ready",type="integer",JSONPath=".status.readyReplicas",description="Ready Machines"
// +kubebuilder:printcolumn:name="Available",type="integer",JSONPath=".status.availableReplicas",description="Available Machines",priority=10
// +kubebuilder:printcolumn:name="Up-to-date",type="integer",JSONPath=".status.upToDateReplicas",description="Up-to-date Machines"
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".spec.version",description="Desired Kubernetes version"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosControlPlane manages the control-plane Machines of a Kairos cluster.
type KairosControlPlane struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec KairosControlPlaneSpec `json:"spec,omitzero"`

	// status is the observed state.
	// +optional
	Status KairosControlPlaneStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions; used by Cluster API's condition helpers.
func (c *KairosControlPlane) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions; used by Cluster API's condition helpers.
func (c *KairosControlPlane) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// KairosControlPlaneList is a list of KairosControlPlane.
type KairosControlPlaneList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of KairosControlPlanes.
	Items []KairosControlPlane `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosControlPlane{}, &KairosControlPlaneList{})
}
