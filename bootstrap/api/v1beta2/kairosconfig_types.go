package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Role is the part a node plays in the cluster.
// +kubebuilder:validation:Enum=control-plane;worker
type Role string

const (
	// RoleControlPlane nodes run the Kubernetes control plane (and etcd).
	RoleControlPlane Role = "control-plane"
	// RoleWorker nodes run workloads only.
	RoleWorker Role = "worker"
)

// Distribution is the Kubernetes distribution the Kairos image ships.
// +kubebuilder:validation:Enum=k0s;k3s
type Distribution string

const (
	// DistributionK0s is k0s (https://k0sproject.io).
	DistributionK0s Distribution = "k0s"
	// DistributionK3s is k3s (https://k3s.io).
	DistributionK3s Distribution = "k3s"
)

// FragmentPosition says where a user cloud-config fragment goes relative to the generated document.
// +kubebuilder:validation:Enum=append;prepend
type FragmentPosition string

const (
	// FragmentAppend puts the fragment's list items after the generated ones.
	FragmentAppend FragmentPosition = "append"
	// FragmentPrepend puts the fragment's list items before the generated ones.
	FragmentPrepend FragmentPosition = "prepend"
)

// Defaults applied by the KairosConfig webhook. The password default exists only for
// development and every object using it gets an admission warning.
const (
	DefaultUserName     = "kairos"
	DefaultUserPassword = "kairos"
	DefaultUserGroup    = "admin"
	DefaultSecretKey    = "value"
)

// TokenIDAnnotation on a bootstrap data Secret names the bootstrap token inside the data (its
// public half), so that the token is kept alive until the node has joined, and re-created from
// the data when it is gone.
const TokenIDAnnotation = "bootstrap.cluster.x-k8s.io/kairos-token-id"

// ReleaseAnnotation on the bootstrap provider's CRDs names the provider release that installed
// them (vX.Y.Z). Release builds stamp it; the control-plane provider reads it from the
// KairosConfig CRD to enforce the version-skew policy. CRDs applied from a source tree carry
// none: their version is unknown and only the contract is checked.
const ReleaseAnnotation = "bootstrap.cluster.x-k8s.io/kairos-release"

// KairosConfigSpec defines how a Kairos node is bootstrapped into a Kubernetes cluster.
//
// The rules between its fields that hold wherever the spec is used (a KairosConfig, a
// KairosConfigTemplate, a KairosControlPlane's kairosConfigSpec) are CEL rules of the CRDs, so
// that they hold without the admission webhooks; the webhooks check them too, in the same
// words, along with the rules CEL cannot express. Rules that depend on the role or distribution
// of a KairosConfig, which default to worker and k0s when unset, are those of nodeSpecRules,
// which KairosConfig and KairosConfigTemplate embed: a control plane's kairosConfigSpec has
// neither, the control plane sets them.
// +kubebuilder:validation:XValidation:rule="!has(self.userPassword) || size(self.userPassword) == 0 || !has(self.userPasswordSecretRef)",message="userPassword and userPasswordSecretRef are mutually exclusive: keep only userPasswordSecretRef",fieldPath=".userPassword",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.workerToken) || size(self.workerToken) == 0 || !has(self.workerTokenSecretRef)",message="workerToken and workerTokenSecretRef are mutually exclusive: keep only workerTokenSecretRef",fieldPath=".workerToken",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.hostname) || size(self.hostname) == 0 || !has(self.hostnamePrefix) || size(self.hostnamePrefix) == 0",message="hostname and hostnamePrefix are mutually exclusive: a template shared by many Machines should use hostnamePrefix only",fieldPath=".hostnamePrefix",reason="FieldValueForbidden"
type KairosConfigSpec struct {
	// role of the node: control-plane or worker. Defaults to worker.
	// +optional
	Role Role `json:"role,omitempty"`

	// distribution is the Kubernetes distribution the Kairos image ships: k0s (default) or k3s.
	// +optional
	Distribution Distribution `json:"distribution,omitempty"`

	// kubernetesVersion the node must run, for example v1.31.2. The node refuses to report
	// success when the installed distribution runs another version. When empty, the owning
	// Machine's spec.version is used.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// image is the Kairos OS image the node runs: an OCI reference to a Kairos image that ships
	// the distribution, e.g. quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1
	// (Kairos names the distribution and its version at the end of the tag). A node that boots
	// another image upgrades to this one (kairos-agent upgrade, then a reboot) before its
	// distribution first starts, so that Machines created later run the image their siblings
	// were upgraded to in place. A tag that names the version is checked against the Machine's
	// version; another tag or a digest is not (admission warns). The only field that may change
	// once the bootstrap data exists (an in-place update). Empty: the image the machine boots.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// singleNode makes a control-plane node also run workloads, without the control-plane
	// taint. Only valid for role control-plane. The control-plane provider sets it when it
	// manages exactly one replica.
	// +optional
	SingleNode bool `json:"singleNode,omitempty"`

	// userName is the login user created on the node. Defaults to kairos.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	UserName string `json:"userName,omitempty"`

	// userPassword is the login user's password (plain or crypt hash). Defaults to kairos,
	// which is for development only and produces an admission warning; prefer
	// userPasswordSecretRef, githubUser or sshPublicKey.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	UserPassword string `json:"userPassword,omitempty"`

	// userPasswordSecretRef reads the login user's password from a Secret in the same
	// namespace. Mutually exclusive with userPassword.
	// +optional
	UserPasswordSecretRef *SecretKeyReference `json:"userPasswordSecretRef,omitempty"`

	// userGroups are the login user's groups. Defaults to [admin].
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=32
	UserGroups []string `json:"userGroups,omitempty"`

	// githubUser authorizes the SSH keys of this GitHub user for the login user.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	GithubUser string `json:"githubUser,omitempty"`

	// sshPublicKey is an SSH public key authorized for the login user.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	SSHPublicKey string `json:"sshPublicKey,omitempty"`

	// workerToken overrides the join token a worker uses (a k0s join token, or a k3s agent
	// token K10<ca hash>::node:<password>; a k3s server token is refused, since whoever reads
	// a worker's bootstrap data could join a server with it). Normally empty: the provider
	// generates short-lived k0s credentials and hands k3s workers the cluster's agent token.
	// Prefer workerTokenSecretRef, which keeps the token out of the object.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	WorkerToken string `json:"workerToken,omitempty"`

	// workerTokenSecretRef reads the worker join token override from a Secret in the same
	// namespace. Mutually exclusive with workerToken.
	// +optional
	WorkerTokenSecretRef *SecretKeyReference `json:"workerTokenSecretRef,omitempty"`

	// manifests are Kubernetes manifests the first control-plane node applies through the
	// distribution's manifest directory: YAML documents that are each a Kubernetes object
	// with apiVersion, kind and metadata.name. Only valid for role control-plane.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Manifests []Manifest `json:"manifests,omitempty"`

	// files are written to the node before the distribution starts.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=200
	Files []File `json:"files,omitempty"`

	// preCommands run on the node before the distribution starts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=10240
	PreCommands []string `json:"preCommands,omitempty"`

	// postCommands run on the node once the distribution service is up, before the
	// bootstrap success sentinel is written.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=10240
	PostCommands []string `json:"postCommands,omitempty"`

	// hostname sets a literal hostname. Mutually exclusive with hostnamePrefix. Not allowed in
	// KairosConfigTemplates, whose Machines would all get the same name. When neither is set
	// and providerID.source is Machine (the default), the node is named after its Machine.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Hostname string `json:"hostname,omitempty"`

	// hostnamePrefix sets the hostname to this prefix followed by a suffix derived from the
	// node's machine id, so that nodes created from one template get distinct names. Only
	// with providerID.source Distribution: the controller could not find such a node.
	// +optional
	// +kubebuilder:validation:MaxLength=50
	HostnamePrefix string `json:"hostnamePrefix,omitempty"`

	// providerID says how the node's Node gets its Machine's provider ID, the only link
	// Cluster API makes between a Machine and its Node (Node spec.providerID equal to Machine
	// spec.providerID): without it the Machine never gets a nodeRef and never becomes ready.
	// +optional
	ProviderID ProviderIDSpec `json:"providerID,omitempty,omitzero"`

	// virtualIP makes the control-plane nodes hold the Cluster's endpoint as a virtual IP
	// among themselves, for infrastructure without a load balancer (vSphere, Metal3, Proxmox):
	// k0s through its own control-plane load balancing (keepalived VRRP virtual IPs), k3s
	// through kube-vip, deployed from the servers' manifests. The address must be the Cluster's
	// spec.controlPlaneEndpoint.host; when the node holding it goes away another control-plane
	// node takes it over. Only on control-plane configs (KairosControlPlane
	// spec.kairosConfigSpec).
	// +optional
	VirtualIP *VirtualIP `json:"virtualIP,omitempty"`

	// install, when set, makes Kairos install itself to disk (booting from an ISO or
	// netboot) and then reboot into the installed system, where the node bootstraps. Leave
	// it empty when the machine boots an already installed disk image.
	// +optional
	Install *Install `json:"install,omitempty"`

	// k0s holds extra k0s options. Only valid with distribution k0s.
	// +optional
	K0s *DistributionOptions `json:"k0s,omitempty"`

	// k3s holds extra k3s options. Only valid with distribution k3s.
	// +optional
	K3s *DistributionOptions `json:"k3s,omitempty"`

	// etcdSnapshots makes a control-plane node take snapshots of its etcd member on a schedule,
	// before every in-place upgrade and on demand, and upload them to an S3-compatible store
	// (docs/backups.md). Only on control-plane configs; a KairosControlPlane sets it from its
	// spec.etcd.snapshots.
	// +optional
	EtcdSnapshots *EtcdSnapshots `json:"etcdSnapshots,omitempty"`

	// cloudConfigFragments are user cloud-config documents merged into the generated one:
	// lists are appended or prepended, maps merge, and a key or file path set by two
	// sources is an error that names both. Each fragment, inline or from a Secret, is read
	// as a Kairos node reads it (yip's types: integer stage file permissions, users with a
	// list of groups, known step keys) and may neither redefine a user nor set p2p, kubevip,
	// cluster or the k0s/k3s blocks; a fragment that breaks a rule is refused before any data
	// is written, naming the fragment and the key.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	CloudConfigFragments []CloudConfigFragment `json:"cloudConfigFragments,omitempty"`
}

// SecretKeyReference selects a key of a Secret in the object's namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key in the Secret's data. Defaults to value.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// Manifest is a Kubernetes manifest applied by the first control-plane node.
// +kubebuilder:validation:XValidation:rule="!has(self.content) || size(self.content) == 0 || !has(self.contentFrom)",message="content and contentFrom are mutually exclusive: keep one",fieldPath=".contentFrom",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="(has(self.content) && size(self.content) > 0) || has(self.contentFrom)",message="set content, or contentFrom to read it from a Secret",fieldPath=".content",reason="FieldValueRequired"
type Manifest struct {
	// name of the manifest file (without directory), for example cni.yaml.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`

	// content is the manifest YAML. Mutually exclusive with contentFrom.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`

	// contentFrom reads the manifest from a Secret in the same namespace.
	// +optional
	ContentFrom *SecretKeyReference `json:"contentFrom,omitempty"`
}

// File is a file written on the node before the distribution starts.
// +kubebuilder:validation:XValidation:rule="!has(self.content) || size(self.content) == 0 || !has(self.contentFrom)",message="content and contentFrom are mutually exclusive: keep one",fieldPath=".contentFrom",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="(has(self.content) && size(self.content) > 0) || has(self.contentFrom)",message="set content, or contentFrom to read it from a Secret",fieldPath=".content",reason="FieldValueRequired"
type File struct {
	// path is the absolute path of the file.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Path string `json:"path"`

	// owner is "user:group": both Linux user and group names, or both numeric ids. Defaults to
	// root:root.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Owner string `json:"owner,omitempty"`

	// permissions in octal, for example "0644". Defaults to "0600".
	// +optional
	// +kubebuilder:validation:MaxLength=4
	Permissions string `json:"permissions,omitempty"`

	// content of the file. Mutually exclusive with contentFrom.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`

	// contentFrom reads the content from a Secret in the same namespace.
	// +optional
	ContentFrom *SecretKeyReference `json:"contentFrom,omitempty"`
}

// Install configures the Kairos installer.
// +kubebuilder:validation:XValidation:rule="!(has(self.reboot) && self.reboot && has(self.poweroff) && self.poweroff)",message="reboot and poweroff are mutually exclusive: keep reboot to boot into the installed system",fieldPath=".poweroff",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!(has(self.reboot) && !self.reboot && !(has(self.poweroff) && self.poweroff) && (!has(self.auto) || self.auto))",message="the machine would stay in the live installer, where the node never bootstraps: remove reboot: false (it defaults to true), or set poweroff if the infrastructure boots the machine again",fieldPath=".reboot"
type Install struct {
	// auto starts the installation without user interaction. Defaults to true.
	// +optional
	Auto *bool `json:"auto,omitempty"`

	// device to install to: auto, or a path such as /dev/sda or /dev/disk/by-id/....
	// Defaults to auto.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Device string `json:"device,omitempty"`

	// reboot into the installed system after installing. Defaults to true unless poweroff is
	// set: the node bootstraps only in the installed system (Kairos itself neither reboots nor
	// powers off by default, which would leave the machine in the live installer). Mutually
	// exclusive with poweroff.
	// +optional
	Reboot *bool `json:"reboot,omitempty"`

	// poweroff after installing, for infrastructure that boots the machine again itself.
	// Mutually exclusive with reboot.
	// +optional
	Poweroff bool `json:"poweroff,omitempty"`
}

// VirtualIP is a virtual IP the control-plane nodes hold among themselves.
type VirtualIP struct {
	// address is the virtual IP, IPv4 or IPv6: the Cluster's spec.controlPlaneEndpoint.host.
	// It must be free in the nodes' network and reachable from the management cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`

	// prefixLength is the length of the address's prefix on the interface: 32 (IPv4) or
	// 128 (IPv6) by default, a host address that needs no route of its own.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	PrefixLength int32 `json:"prefixLength,omitempty"`

	// interface is the network interface that carries the address; by default the interface
	// of the node's default route (k0s and kube-vip both pick it).
	// +optional
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface,omitempty"`

	// virtualRouterID is the VRRP router ID of the k0s keepalived instance, which must be
	// unique among the VRRP instances of the nodes' broadcast domain; k0s' default is 51. k3s
	// ignores it (kube-vip elects with a lease), with an admission warning, so that one
	// template serves both distributions.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	VirtualRouterID int32 `json:"virtualRouterID,omitempty"`

	// kubeVIPImage is the kube-vip image the k3s servers run (k3s only); by default the
	// version this provider was tested with, pinned.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	KubeVIPImage string `json:"kubeVIPImage,omitempty"`
}

// DistributionOptions are extra options for the k0s or k3s service.
type DistributionOptions struct {
	// args are extra command-line arguments, appended after the generated ones. One item may
	// hold a flag and its value. Flags the provider sets itself (the token, server, config,
	// data directory, cluster-init, single-node and listen-port flags, in any spelling) and
	// flags the node's role does not take (k3s server flags on agents, k0s controller flags
	// on workers) are refused.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	Args []string `json:"args,omitempty"`

	// env sets extra environment variables of the service.
	// +optional
	// +kubebuilder:validation:MaxProperties=100
	Env map[string]string `json:"env,omitempty"`

	// config is extra distribution configuration in YAML. For k0s, a partial ClusterConfig
	// merged into the generated one on control-plane nodes, checked against the fields of
	// the k0s release the provider mirrors (k0s refuses unknown fields); the endpoint, the
	// API port and the Cluster's network are generated from the Cluster. For k3s, the
	// content of a config.yaml.d file, whose keys follow the rules of args.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Config string `json:"config,omitempty"`
}

// CloudConfigFragment is a user cloud-config document merged into the generated one.
// +kubebuilder:validation:XValidation:rule="!has(self.content) || size(self.content) == 0 || !has(self.contentFrom)",message="content and contentFrom are mutually exclusive: keep one",fieldPath=".contentFrom",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="(has(self.content) && size(self.content) > 0) || has(self.contentFrom)",message="set content, or contentFrom to read it from a Secret",fieldPath=".content",reason="FieldValueRequired"
type CloudConfigFragment struct {
	// name identifies the fragment in merge errors.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// position is append (default) or prepend.
	// +optional
	Position FragmentPosition `json:"position,omitempty"`

	// content is the cloud-config YAML. Mutually exclusive with contentFrom.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Content string `json:"content,omitempty"`

	// contentFrom reads the fragment from a Secret in the same namespace.
	// +optional
	ContentFrom *SecretKeyReference `json:"contentFrom,omitempty"`
}

// KairosConfigStatus is the observed state of a KairosConfig.
type KairosConfigStatus struct {
	// conditions represent the observations of the KairosConfig's state.
	// Known condition types are Ready, DataSecretAvailable, JoinTokenAvailable and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization provides observations of the bootstrap data creation.
	// NOTE: part of the Cluster API contract, used to orchestrate Machine provisioning.
	// +optional
	Initialization KairosConfigInitializationStatus `json:"initialization,omitempty,omitzero"`

	// dataSecretName is the name of the Secret that stores the bootstrap data.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DataSecretName string `json:"dataSecretName,omitempty"`

	// observedGeneration is the latest generation observed by the controller.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// No status.ready (the v1beta1 contract's "initialization completed"): Cluster API v1.14
	// reads it only from bootstrap configs on the v1beta1 contract. Its Machine and
	// MachinePool controllers take the contract from the CRD's latest contract label
	// (sigs.k8s.io/cluster-api internal/contract/version.go, GetContractVersion) and read
	// status.ready for v1beta1, status.initialization.dataSecretCreated otherwise
	// (internal/contract/bootstrap.go, DataSecretCreated); see the book's
	// developer/providers/contracts/bootstrap-config.md, "Compatibility with the deprecated
	// v1beta1 contract". The KairosConfig CRD carries the v1beta2 contract label only
	// (bootstrap/config/crd/kustomization.yaml), and nothing else reads the field.
}

// KairosConfigInitializationStatus provides observations of the bootstrap data creation.
// +kubebuilder:validation:MinProperties=1
type KairosConfigInitializationStatus struct {
	// dataSecretCreated is true when the Machine's bootstrap Secret has been created.
	// NOTE: part of the Cluster API contract, used to orchestrate Machine provisioning.
	// +optional
	DataSecretCreated *bool `json:"dataSecretCreated,omitempty"`
}

// ProviderIDSource is where a Node's provider ID comes from.
// +kubebuilder:validation:Enum=Machine;Distribution
type ProviderIDSource string

const (
	// ProviderIDFromMachine: once the infrastructure provider has set the Machine's
	// spec.providerID (whatever its convention: vsphere://<BIOS UUID>, proxmox://<UUID>,
	// kubevirt://<name>, metal3://..., known before or long after the node booted), the
	// bootstrap controller writes it to the Node, which registers without one. The node is
	// named after its Machine unless hostname is set (hostnamePrefix, which makes names the
	// controller cannot predict, is refused), and k3s servers run without k3s' embedded cloud
	// controller, which would claim every Node with k3s://<node name> first. Not available to
	// MachinePools, whose nodes share one KairosConfig.
	ProviderIDFromMachine ProviderIDSource = "Machine"
	// ProviderIDFromDistribution leaves the provider ID to the distribution: k3s' embedded
	// cloud controller sets k3s://<node name>, k0s sets none. Only for infrastructure whose
	// provider IDs have that form, or whose provider links Nodes itself.
	ProviderIDFromDistribution ProviderIDSource = "Distribution"
)

// ProviderIDSpec says how a node's Node gets its Machine's provider ID.
type ProviderIDSpec struct {
	// source of the Node's provider ID: Machine (the default) or Distribution.
	// +optional
	Source ProviderIDSource `json:"source,omitempty"`
}

// nodeSpecRules holds, as CEL rules of the CRDs, the rules of a KairosConfig's spec that depend
// on its role and distribution, which default to worker and k0s when unset. They hold for the
// spec of a KairosConfig and of a KairosConfigTemplate's template, but not on KairosConfigSpec
// itself: a control plane's kairosConfigSpec has no role or distribution (the control plane
// sets them), and KairosControlPlane has its own rules for it.
//
// Both KairosConfig and KairosConfigTemplateResource embed this type inline, so that the rules
// are written once (they used to be repeated on both spec fields): controller-gen merges the
// type-level rules of an inline field into the schema of the embedding type (the object, and
// spec.template), where they refer to spec and report at spec.<field> (spec.template.spec.<field>
// for templates) in the same words as rules on the spec field did. It has no fields, so it
// changes neither the JSON nor the Go literals of either type. One difference with rules on
// spec: CRD validation ratcheting, which skips a failing rule whose value did not change, no
// longer spares an object whose spec breaks one when only its metadata or status changes. The
// webhooks have refused such specs from the start, so no admitted object breaks one. The
// webhooks check the same rules in the same words (common/provider/validation), for the places
// CEL does not reach.
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.singleNode) || !self.spec.singleNode || (has(self.spec.role) && self.spec.role == 'control-plane')",message="only control-plane nodes can be single-node: remove singleNode or set role: control-plane",fieldPath=".spec.singleNode",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !(has(self.spec.role) && self.spec.role == 'control-plane') || !has(self.spec.workerToken) || size(self.spec.workerToken) == 0",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".spec.workerToken",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !(has(self.spec.role) && self.spec.role == 'control-plane') || !has(self.spec.workerTokenSecretRef)",message="only workers use a worker token: remove it (control-plane credentials are generated)",fieldPath=".spec.workerTokenSecretRef",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.manifests) || size(self.spec.manifests) == 0 || (has(self.spec.role) && self.spec.role == 'control-plane')",message="manifests are applied by the control plane: move them to the control-plane KairosConfig (or KairosControlPlane)",fieldPath=".spec.manifests",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.k0s) || !has(self.spec.k0s.config) || size(self.spec.k0s.config) == 0 || (has(self.spec.role) && self.spec.role == 'control-plane')",message="the k0s ClusterConfig is read by controllers only: remove it from worker configs",fieldPath=".spec.k0s.config",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.virtualIP) || (has(self.spec.role) && self.spec.role == 'control-plane')",message="only control-plane nodes hold the virtual IP: remove it from worker configs",fieldPath=".spec.virtualIP",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.k0s) || !has(self.spec.distribution) || self.spec.distribution == 'k0s'",messageExpression="'k0s options do not apply to distribution ' + self.spec.distribution + ': move them to spec.k3s or set distribution: k0s'",fieldPath=".spec.k0s",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.k3s) || (has(self.spec.distribution) && self.spec.distribution == 'k3s')",messageExpression="'k3s options do not apply to distribution ' + (has(self.spec.distribution) ? self.spec.distribution : 'k0s') + ': move them to spec.k0s or set distribution: k3s'",fieldPath=".spec.k3s",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.etcdSnapshots) || (has(self.spec.role) && self.spec.role == 'control-plane')",message="only control-plane nodes run etcd: remove etcdSnapshots from worker configs",fieldPath=".spec.etcdSnapshots",reason="FieldValueForbidden"
type nodeSpecRules struct{}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kairosconfigs,scope=Namespaced,categories=cluster-api,shortName=kc;kcfg
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Role",type="string",JSONPath=".spec.role",description="Node role"
// +kubebuilder:printcolumn:name="Distribution",type="string",JSONPath=".spec.distribution",description="Kubernetes distribution"
// +kubebuilder:printcolumn:name="Data Secret Created",type="boolean",JSONPath=".status.initialization.dataSecretCreated",description="Bootstrap data Secret created"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Ready condition"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// KairosConfig renders the Kairos cloud-config that turns one machine into a k0s or k3s node.
type KairosConfig struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// The CEL rules of a node's spec (see nodeSpecRules).
	nodeSpecRules `json:",inline"`

	// spec is the desired bootstrap configuration.
	// +optional
	Spec KairosConfigSpec `json:"spec,omitempty,omitzero"`

	// status is the observed state.
	// +optional
	Status KairosConfigStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions; used by Cluster API's condition helpers.
func (c *KairosConfig) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions; used by Cluster API's condition helpers.
func (c *KairosConfig) SetConditions(conditions []metav1.Condition) { c.Status.Conditions = conditions }

// +kubebuilder:object:root=true

// KairosConfigList is a list of KairosConfig.
type KairosConfigList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of KairosConfigs.
	Items []KairosConfig `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &KairosConfig{}, &KairosConfigList{})
}
