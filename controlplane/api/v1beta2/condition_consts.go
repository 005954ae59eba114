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

	DeletingReason             = "Deleting"
	NotDeletingReason          = "NotDeleting"
	DeletingWaitingForWorkers  = "WaitingForWorkersDeletion"
	DeletingWaitingForMachines = "WaitingForMachinesDeletion"
	DeletionCompletedReason    = "DeletionCompleted"
)
