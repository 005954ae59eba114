package v1beta2

// Condition types and reasons of the simulation infrastructure objects. Cluster API mirrors an
// infrastructure object's Ready condition into the owner's InfrastructureReady condition, so
// a node that refuses its bootstrap data becomes visible on the Machine too.
const (
	// ReadyCondition summarises the object's other conditions.
	ReadyCondition = "Ready"

	// ProvisionedCondition is true once the simulated machine exists and has been handed its
	// bootstrap data (KairosSimMachine), or once the endpoint is allocated (KairosSimCluster).
	ProvisionedCondition = "Provisioned"

	// BootstrapSucceededCondition reports what the simulated node made of its bootstrap data:
	// true once its distribution is up and it wrote the Cluster API bootstrap sentinel, false
	// with the node's reason (for example BootstrapDataRefused or JoinFailed) otherwise. On a
	// KairosSimMachinePool it is true when every machine of the pool did, false with the
	// reasons of those that did not.
	BootstrapSucceededCondition = "BootstrapSucceeded"
)

// Reasons used by the controllers themselves; the BootstrapSucceeded reasons come from the
// simulated node (see github.com/kairos-capi/kairos-capi/test/simnode).
const (
	ReadyReason        = "Ready"
	NotReadyReason     = "NotReady"
	ReadyUnknownReason = "ReadyUnknown"

	ProvisionedReason                     = "Provisioned"
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	WaitingForControlPlaneEndpointReason  = "WaitingForControlPlaneEndpoint"
	WaitingForBootstrapDataReason         = "WaitingForBootstrapData"
	DeletingReason                        = "Deleting"

	// InstancesBootstrappedReason and InstancesNotBootstrappedReason: the BootstrapSucceeded
	// reasons of a KairosSimMachinePool.
	InstancesBootstrappedReason    = "InstancesBootstrapped"
	InstancesNotBootstrappedReason = "InstancesNotBootstrapped"
)

// Finalizer is set on KairosSimClusters, KairosSimMachines and KairosSimMachinePools so that
// their simulated resources (workload API server, nodes) are released before the objects go away.
const Finalizer = "kairossim.infrastructure.cluster.x-k8s.io"
