package render

import (
	"github.com/kairos-capi/kairos-capi/common/pki"
)

// Distribution is the Kubernetes distribution a node runs.
type Distribution string

const (
	K0s Distribution = "k0s"
	K3s Distribution = "k3s"
)

// Role is a node's role in the cluster.
type Role string

const (
	RoleControlPlane Role = "control-plane"
	RoleWorker       Role = "worker"
)

// Endpoint is the control-plane endpoint (API server host and port): where
// nodes and clients reach the API servers, often a load balancer.
type Endpoint struct {
	Host string
	Port int32
}

// Network is the Cluster's network (Cluster API's spec.clusterNetwork).
type Network struct {
	// APIServerPort is the port the API servers bind to on the nodes; 0
	// means the endpoint's port (see Node.apiServerPort). The endpoint port
	// may differ: a load balancer listening on 443 that forwards to 6443.
	APIServerPort int32
	// PodCIDRs and ServiceCIDRs hold one CIDR, or one IPv4 and one IPv6 CIDR
	// (dual stack). Empty leaves the distribution's default.
	PodCIDRs, ServiceCIDRs []string
	// ServiceDomain is the cluster DNS domain; empty leaves the
	// distribution's default (cluster.local).
	ServiceDomain string
}

// apiServerPort returns the port the API servers bind to: the Cluster's
// apiServerPort, or, when it is unset, the endpoint's port.
//
// Cluster API documents apiServerPort as "Defaults to 6443" (kubeadm's bind
// port). This provider keeps what it did before the field was read, binding
// to the endpoint's port when the Cluster does not say: existing clusters
// whose endpoint reaches the API servers directly on another port (a VIP, a
// single node, the simulated infrastructure of the tests) keep working, and
// k0s before v1.34.1, which cannot run behind a port-translating load
// balancer, is not refused for clusters that never asked for one. A Cluster
// behind a port-translating load balancer sets apiServerPort (6443 behind
// 443, say).
func (n *Node) apiServerPort() int32 {
	if n.Network.APIServerPort == 0 {
		return n.Endpoint.Port
	}
	return n.Network.APIServerPort
}

// User is an OS user created on the node.
type User struct {
	Name string
	// Password is plain or crypt(3)-hashed; empty locks password login.
	Password string
	Groups   []string
	// SSHAuthorizedKeys holds raw keys or "github:<user>" / "gitlab:<user>".
	SSHAuthorizedKeys []string
}

// Install asks the node to install itself to disk first.
type Install struct {
	Auto bool
	// Device is "auto", a /dev/... path or script://<command>.
	Device string
	// Reboot and Poweroff are exclusive, and an automatic installation needs
	// one of them: the installer boots a live system, where the bootstrap
	// steps do not run, and Kairos' own default is to stay there.
	Reboot, Poweroff bool
}

// File is a user file written on the node before the distribution starts.
type File struct {
	Path    string
	Content string
	// Owner is "user:group" (both names or both numeric ids, syntax.IsFileOwner); empty means
	// root:root.
	Owner string
	// Permissions is the file mode; 0 means 0600.
	Permissions uint32
}

// Manifest is a Kubernetes manifest the distribution applies (control plane
// only).
type Manifest struct {
	// Name names the file: [a-z0-9]([-a-z0-9._]*[a-z0-9])?, unique.
	Name    string
	Content string
}

// PKI is the cluster PKI pre-seeded on control-plane nodes, so the cluster
// trusts what the management side generated.
type PKI struct {
	ClusterCA    pki.KeyPair
	EtcdCA       pki.KeyPair
	FrontProxyCA pki.KeyPair
	// ServiceAccount: Key is the private key PEM, Cert the public key PEM.
	ServiceAccount pki.KeyPair
}

// Node describes the bootstrap data of one Machine.
type Node struct {
	Distribution Distribution
	Role         Role
	// Init (control plane only) creates the cluster; false joins an existing
	// one.
	Init bool
	// SingleNode (control plane only) also runs workloads: no control-plane
	// taint.
	SingleNode bool
	// KubernetesVersion, e.g. "v1.31.2" (or "v1.31.2+k3s1" to pin the
	// distribution release): the node refuses to start the distribution and
	// never reports bootstrap success unless the installed one matches.
	KubernetesVersion string
	ClusterName       string
	// Endpoint is the control-plane endpoint.
	Endpoint Endpoint
	// Network is the Cluster's network: API server port, pod and service
	// CIDRs, service domain.
	Network Network
	// VIP (control plane only) makes the node one of those holding the
	// endpoint as a virtual IP: k0s keepalived, k3s kube-vip.
	VIP *VIP
	// ExternalProviderID says that the Node gets its provider ID from outside
	// the node (the bootstrap controller copies the Machine's): k3s servers
	// run without k3s' embedded cloud controller, which would otherwise set
	// k3s://<node name> first (a Node's provider ID cannot change once set).
	// k0s runs no cloud controller and registers none.
	ExternalProviderID bool
	// Hostname is a literal hostname; HostnamePrefix instead derives one from
	// the prefix and the machine id on the node. At most one may be set.
	Hostname       string
	HostnamePrefix string
	// Image is the Kairos OS image (an OCI reference) the node must run before its
	// distribution first starts; empty: the image the machine boots. A node that booted another
	// image upgrades to it and reboots first (imageScript says how and why).
	Image string
	// Users: at least one (the Kairos schema requires it).
	Users []User
	// Install nil omits install: (the disk image is already installed).
	Install *Install
	Files   []File
	// PreCommands run once before the distribution starts, PostCommands once
	// after it is up and before the bootstrap sentinel is written; a failing
	// command fails the bootstrap.
	PreCommands, PostCommands []string
	// Manifests are applied by the distribution (control plane only).
	Manifests []Manifest
	// PKI is required on control-plane nodes and refused on workers.
	PKI *PKI
	// JoinToken: k0s: the join token (controller token for joining control
	// planes, worker token for workers; none for the init node). k3s: the
	// server token K10<ca hash>::server:<password> on servers, the agent
	// token K10<ca hash>::node:<password> on agents, which never see the
	// server token.
	JoinToken string
	// AgentToken (k3s servers only, required) is the agent token every server
	// accepts from agents (k3s --agent-token-file).
	AgentToken string
	// Args are extra distribution arguments, appended after ours.
	Args []string
	// Env is extra distribution environment.
	Env map[string]string
	// Config is extra distribution configuration YAML. k0s (control plane
	// only): a partial ClusterConfig merged into the generated one, a key set
	// by both is an error. k3s: a config.yaml.d file.
	Config string
	// EtcdSnapshots (control plane only) makes the node snapshot its etcd
	// member to an S3-compatible store (snapshots.go).
	EtcdSnapshots *EtcdSnapshots
}

// Paths and names the rendered document uses on the node.
const (
	// SentinelPath is the Cluster API bootstrap success sentinel.
	SentinelPath = "/run/cluster-api/bootstrap-success.complete"
	// ScriptDir holds the bootstrap scripts and their state markers
	// (persistent on Kairos).
	ScriptDir = "/usr/local/lib/kairos-capi"
	// BootstrapUnit waits for the distribution, runs the post-commands and
	// writes the sentinel.
	BootstrapUnit = "kairos-capi-bootstrap.service"

	PreflightScript = ScriptDir + "/preflight.sh"
	// ImageScript upgrades the node to Node.Image before the distribution first starts
	// ("upgrade", run by the network stage) and tells whether it runs it ("check", run by the
	// preflight); ImageUpgradeMarker records the image it upgraded to, so that a node whose
	// upgrade did not boot does not upgrade and reboot forever.
	ImageScript        = ScriptDir + "/image.sh"
	ImageUpgradeMarker = ScriptDir + "/image.upgraded"
	BootstrapScript    = ScriptDir + "/bootstrap.sh"
	PreCommandsScript  = ScriptDir + "/pre-commands.sh"
	PostCommandsScript = ScriptDir + "/post-commands.sh"
	PreCommandsMarker  = ScriptDir + "/pre-commands.done"
	PostCommandsMarker = ScriptDir + "/post-commands.done"
	// BootstrapDoneMarker is written with the sentinel; it persists (unlike
	// the sentinel in /run), so that later boots know the node has
	// bootstrapped once.
	BootstrapDoneMarker = ScriptDir + "/bootstrap.done"
	BootstrapUnitPath   = "/etc/systemd/system/" + BootstrapUnit
	preflightDropInName = "10-kairos-capi-preflight.conf"

	// BootAssessmentScript extends Kairos' boot assessment to the distribution (see
	// bootassessment.go): "arm" (boot.before) makes GRUB boot the fallback image at the next
	// boot while a new Kairos release has not been verified; "verify" (BootAssessmentUnit) waits
	// for the distribution to be ready, then records the release in VerifiedReleaseFile and
	// disarms, or reboots into the fallback image after BootAssessmentTimeout.
	BootAssessmentScript = ScriptDir + "/boot-assessment.sh"
	BootAssessmentUnit   = "kairos-capi-boot-assessment.service"
	// BootAssessmentUnitPath is the unit that runs "verify"; the network stage starts it
	// without waiting for it.
	BootAssessmentUnitPath = "/etc/systemd/system/" + BootAssessmentUnit
	// VerifiedReleaseFile holds the last Kairos release (the /etc/kairos-release triple
	// imageScript compares) on which the distribution was seen ready. It lives in ScriptDir,
	// under /usr/local: Kairos keeps /usr/local on its persistent partition, which an upgrade
	// does not replace (the images are rebuilt, /usr/local is not part of them), so the record
	// outlives the image it describes; /etc and /var/lib outside the bind mounts would be gone
	// after the first reboot, and /oem is Kairos' configuration partition, not a place for
	// state.
	VerifiedReleaseFile = ScriptDir + "/verified-release"
	// BootAssessmentArmedMarker tells "verify" that "arm" armed GRUB during this boot; in /run
	// on purpose, so that no later boot mistakes it for its own.
	BootAssessmentArmedMarker = "/run/kairos-capi/boot-assessment.armed"
	// CosStateDir is where Kairos mounts COS_STATE (read-only) on a running system; GRUB reads
	// its boot assessment variables from BootAssessmentEnv there, and Kairos installs the GRUB
	// side of the assessment as BootAssessmentGrubHook (08_grub.yaml, after-install and
	// after-upgrade).
	CosStateDir            = "/run/initramfs/cos-state"
	BootAssessmentEnv      = CosStateDir + "/boot_assessment"
	BootAssessmentGrubHook = CosStateDir + "/grub_boot_assessment"

	K0sConfigPath  = "/etc/k0s/k0s.yaml"
	K0sTokenPath   = "/etc/k0s/token"
	K0sPKIDir      = "/var/lib/k0s/pki"
	K0sManifestDir = "/var/lib/k0s/manifests/kairos-capi"

	K3sTokenPath      = "/etc/rancher/k3s/token"
	K3sAgentTokenPath = "/etc/rancher/k3s/agent-token"
	K3sTLSDir         = "/var/lib/rancher/k3s/server/tls"
	K3sManifestDir    = "/var/lib/rancher/k3s/server/manifests"
	K3sManifestPrefix = "kairos-capi-"
	K3sUserConfigPath = "/etc/rancher/k3s/config.yaml.d/90-kairos-capi.yaml"

	// UninitializedTaint keeps workloads off a worker until Cluster API has
	// initialised its Node.
	UninitializedTaint = "node.cluster.x-k8s.io/uninitialized:NoSchedule"
	// ControlPlaneTaint keeps workloads off control-plane nodes.
	ControlPlaneTaint = "node-role.kubernetes.io/control-plane:NoSchedule"

	// EtcdClientPort is where every control-plane node serves etcd's client
	// API on its own addresses (TLS, client certificates of the cluster's
	// etcd CA): the control-plane provider checks each member's health there.
	// k3s listens on the node address by default (k3s pkg/etcd/etcd.go,
	// listenClientURLs); k0s only on 127.0.0.1 unless the ClusterConfig's
	// storage.etcd.extraArgs say otherwise (k0s
	// pkg/component/controller/etcd.go), so the k0s config sets
	// K0sEtcdListenClientURLs.
	EtcdClientPort = 2379
	// K0sEtcdListenClientURLs makes k0s' etcd serve clients on every IPv4
	// address of the node, loopback included (k0s' own kube-apiserver keeps
	// using 127.0.0.1:2379).
	K0sEtcdListenClientURLs = "https://0.0.0.0:2379"

	// MaxDocumentSize is the most bootstrap data a Secret holds: the API
	// server refuses Secrets whose data exceed 1 MiB
	// (k8s.io/api/core/v1 MaxSecretSize).
	MaxDocumentSize = 1 << 20

	// HostnameSuffixTemplate is appended to HostnamePrefix; yip renders it
	// from /etc/machine-id when it sets the hostname.
	HostnameSuffixTemplate = "{{ trunc 8 .MachineID }}"
)

// ServiceName is the systemd unit that runs the distribution for the role.
func ServiceName(d Distribution, r Role) string {
	switch {
	case d == K0s && r == RoleControlPlane:
		return "k0scontroller"
	case d == K0s:
		return "k0sworker"
	case d == K3s && r == RoleControlPlane:
		return "k3s"
	default:
		return "k3s-agent"
	}
}
