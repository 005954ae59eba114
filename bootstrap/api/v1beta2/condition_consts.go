package v1beta2

// Condition types of a KairosConfig.
const (
	// ReadyCondition summarizes the KairosConfig; Cluster API mirrors it into the Machine's
	// BootstrapConfigReady condition.
	ReadyCondition = "Ready"

	// DataSecretAvailableCondition is true once the bootstrap data Secret exists. While it is
	// false, its reason says what rendering waits for.
	DataSecretAvailableCondition = "DataSecretAvailable"

	// JoinTokenAvailableCondition is set while the bootstrap data holds a join token the
	// provider generated and a node may still join with it (a Machine without a Node, or a
	// MachinePool, whose write-once data must keep working for every node it adds). It is
	// true while the token exists in the workload cluster; the provider refreshes it, and
	// re-creates it with the same ID and secret when it has expired or was deleted. It is
	// removed once no node needs the token any more.
	JoinTokenAvailableCondition = "JoinTokenAvailable"

	// NodeProviderIDCondition is set on a Machine's KairosConfig with providerID.source
	// Machine: true once the Node named in the data carries the Machine's provider ID (the
	// controller writes it there when the Node registered without one), which is what lets
	// Cluster API link the two.
	NodeProviderIDCondition = "NodeProviderID"
)

// Reasons of the NodeProviderID condition.
const (
	// NodeProviderIDSetReason: the Node carries the Machine's provider ID.
	NodeProviderIDSetReason = "NodeProviderIDSet"

	// WaitingForMachineProviderIDReason: the infrastructure provider has not set the Machine's
	// spec.providerID yet.
	WaitingForMachineProviderIDReason = "WaitingForMachineProviderID"

	// WaitingForNodeReason: no Node of the expected name has registered yet, or the workload
	// cluster is unreachable.
	WaitingForNodeReason = "WaitingForNode"

	// NodeProviderIDConflictReason: the Node registered with another provider ID, which can
	// never change: Cluster API cannot link it to the Machine.
	NodeProviderIDConflictReason = "NodeProviderIDConflict"
)

// Reasons of the JoinTokenAvailable condition.
const (
	// JoinTokenValidReason: the token exists and its expiration was pushed forward.
	JoinTokenValidReason = "JoinTokenValid"

	// JoinTokenRecreatedReason: the token no longer existed (expired and removed by the
	// workload cluster's token cleaner, or deleted) and was re-created from the data.
	JoinTokenRecreatedReason = "JoinTokenRecreated"

	// JoinTokenUnavailableReason: the token could not be refreshed or re-created (for
	// example the workload cluster is unreachable); retried.
	JoinTokenUnavailableReason = "JoinTokenUnavailable"
)

// Reasons of the Ready condition.
const (
	ReadyReason        = "Ready"
	NotReadyReason     = "NotReady"
	ReadyUnknownReason = "ReadyUnknown"
)

// Reasons of the DataSecretAvailable condition.
const (
	// DataSecretAvailableReason: the bootstrap data Secret exists.
	DataSecretAvailableReason = "DataSecretAvailable"

	// WaitingForClusterInfrastructureReason: the Cluster's infrastructure is not provisioned.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"

	// WaitingForControlPlaneEndpointReason: the Cluster has no spec.controlPlaneEndpoint yet.
	WaitingForControlPlaneEndpointReason = "WaitingForControlPlaneEndpoint"

	// WaitingForKubernetesVersionReason: neither the KairosConfig nor its Machine sets a version.
	WaitingForKubernetesVersionReason = "WaitingForKubernetesVersion"

	// WaitingForInitLockReason: another control-plane Machine is initializing the cluster.
	WaitingForInitLockReason = "WaitingForInitLock"

	// WaitingForControlPlaneInitializedReason: joining nodes wait for the first control plane.
	WaitingForControlPlaneInitializedReason = "WaitingForControlPlaneInitialized"

	// WaitingForClusterCertificatesReason: the cluster certificates (<cluster>-ca, -etcd,
	// -proxy, -sa) a control-plane node needs do not exist yet.
	WaitingForClusterCertificatesReason = "WaitingForClusterCertificates"

	// WaitingForJoinTokenReason: the join credentials could not be produced yet (for example
	// the workload cluster is not reachable, or the k3s tokens do not exist yet).
	WaitingForJoinTokenReason = "WaitingForJoinToken"

	// WaitingForReferencedSecretReason: a Secret referenced by the spec does not exist.
	WaitingForReferencedSecretReason = "WaitingForReferencedSecret"

	// InvalidConfigurationReason: the spec cannot be rendered (for example a cloud-config
	// fragment conflicts with the generated document). The message says what to fix.
	InvalidConfigurationReason = "InvalidConfiguration"

	// DataSecretCreationFailedReason: creating the Secret failed; retried.
	DataSecretCreationFailedReason = "DataSecretCreationFailed"
)
