package v1beta2

// Condition types of a KairosControlPlane. Cluster API mirrors Available into the Cluster's
// ControlPlaneAvailable condition and reads RollingOut, ScalingUp and ScalingDown.
const (
	AvailableCondition             = "Available"
	InitializedCondition           = "Initialized"
	CertificatesAvailableCondition = "CertificatesAvailable"
	MachinesReadyCondition         = "MachinesReady"
	MachinesUpToDateCondition      = "MachinesUpToDate"
	RollingOutCondition            = "RollingOut"
	ScalingUpCondition             = "ScalingUp"
	ScalingDownCondition           = "ScalingDown"
	RemediatingCondition           = "Remediating"
	DeletingCondition              = "Deleting"
	// EtcdClusterHealthyCondition summarizes the etcd members of the control plane, as etcd
	// itself reports them (see MachineEtcdMemberHealthyCondition).
	EtcdClusterHealthyCondition = "EtcdClusterHealthy"
	// BootstrapProviderCompatibleCondition tells whether the installed bootstrap provider (its
	// KairosConfig CRD) is within the version-skew policy and accepts the KairosConfigs of new
	// Machines. While it is False no Machine is created, rolled out or remediated.
	BootstrapProviderCompatibleCondition = "BootstrapProviderCompatible"
	// EtcdRestoredCondition says what the control plane restored when it replaced its last
	// Machine with one that starts the cluster again from the newest etcd snapshot
	// (spec.etcd.snapshots): False while that Machine restores and starts, True with the
	// snapshot's name and time once its node reported them. Absent on a control plane that never
	// restored; it keeps describing the last restore afterwards.
	EtcdRestoredCondition = "EtcdRestored"
	// EtcdSnapshotsUpToDateCondition tells whether every control-plane Machine's node has a
	// snapshot in the store newer than two scheduled times of spec.etcd.snapshots.schedule
	// (for a regular schedule: not older than twice its interval). Absent without snapshots.
	EtcdSnapshotsUpToDateCondition = "EtcdSnapshotsUpToDate"
)

// Reasons of EtcdSnapshotsUpToDateCondition.
const (
	EtcdSnapshotsUpToDateReason   = "UpToDate"
	EtcdSnapshotsStaleReason      = "Stale"
	EtcdSnapshotsUnknownReason    = "Unknown"
	EtcdSnapshotsStoreUnreachable = "StoreUnreachable"
)

// Reasons of EtcdRestoredCondition.
const (
	EtcdRestoringReason = "Restoring"
	EtcdRestoredReason  = "Restored"
)

// MachineEtcdMemberHealthyCondition is set on every control-plane Machine: whether the etcd
// member the Machine hosts is in etcd's member list, promoted, free of alarms, and serves a
// quorum read at the Machine's address. Preflight checks, remediation and Available read it.
const MachineEtcdMemberHealthyCondition = "EtcdMemberHealthy"

// Reasons of MachineEtcdMemberHealthyCondition.
const (
	EtcdMemberHealthyReason          = "Healthy"
	EtcdMemberNotHealthyReason       = "NotHealthy"
	EtcdMemberInspectionFailedReason = "InspectionFailed"
	EtcdMemberDeletingReason         = "Deleting"
)

// Reasons of the conditions above.
const (
	AvailableReason    = "Available"
	NotAvailableReason = "NotAvailable"

	InitializedReason    = "Initialized"
	NotInitializedReason = "NotInitialized"

	CertificatesAvailableReason     = "CertificatesAvailable"
	CertificatesInternalErrorReason = "InternalError"

	ReadyReason        = "Ready"
	NotReadyReason     = "NotReady"
	ReadyUnknownReason = "ReadyUnknown"
	NoReplicasReason   = "NoReplicas"

	UpToDateReason        = "UpToDate"
	NotUpToDateReason     = "NotUpToDate"
	UpToDateUnknownReason = "UpToDateUnknown"

	RollingOutReason    = "RollingOut"
	NotRollingOutReason = "NotRollingOut"

	ScalingUpReason    = "ScalingUp"
	NotScalingUpReason = "NotScalingUp"

	ScalingDownReason    = "ScalingDown"
	NotScalingDownReason = "NotScalingDown"

	RemediatingReason              = "Remediating"
	NotRemediatingReason           = "NotRemediating"
	RemediationDeferredReason      = "RemediationDeferred"
	RemediationLimitReachedReason  = "RemediationLimitReached"
	RemediationBlockedQuorumReason = "RemediationBlockedByQuorum"

	EtcdClusterHealthyReason       = "Healthy"
	EtcdClusterNotHealthyReason    = "NotHealthy"
	EtcdClusterHealthUnknownReason = "HealthUnknown"

	BootstrapProviderCompatibleReason    = "Compatible"
	BootstrapProviderNotCompatibleReason = "NotCompatible"
	KairosConfigRefusedReason            = "KairosConfigRefused"

	DeletingReason                   = "Deleting"
	NotDeletingReason                = "NotDeleting"
	DeletingWaitingForWorkersReason  = "WaitingForWorkersDeletion"
	DeletingWaitingForMachinesReason = "WaitingForMachinesDeletion"
	DeletionCompletedReason          = "DeletionCompleted"
)
