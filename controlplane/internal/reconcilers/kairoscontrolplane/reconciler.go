// Package kairoscontrolplane reconciles KairosControlPlanes: it owns the cluster certificates
// and kubeconfig, creates one initializing Machine and then joining ones, scales and rolls
// them out one at a time behind preflight checks, removes etcd members before Machines go,
// and remediates Machines a MachineHealthCheck marks unhealthy.
package kairoscontrolplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/phases"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// Finalizer keeps a KairosControlPlane until its Machines are gone.
const Finalizer = "kairos.controlplane.cluster.x-k8s.io"

// requeueWhileBusy is how often a control plane is looked at while an operation whose end no
// watch reports (a Machine going away, etcd members leaving) is in progress.
const requeueWhileBusy = 5 * time.Second

// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kairoscontrolplanes;kairoscontrolplanes/status;kairoscontrolplanes/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigtemplates,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;machines/status,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=*,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles KairosControlPlanes.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached, to confirm what the cache says is missing before creating it.
	APIReader client.Reader
	// ClusterCache reaches workload clusters (etcd membership).
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue restricts reconciliation to objects carrying this watch-filter label.
	WatchFilterValue string
	// HealthInterval is how often a control plane with Machines is looked at when nothing else
	// happens: etcd's health is not something a watch reports. Default: defaultHealthInterval.
	HealthInterval time.Duration

	// controller defers the next reconciliation until the cache has seen what this one wrote, so
	// that a Machine just created or deleted is never missed (which could create a second surge
	// Machine or remove two etcd members at once).
	controller capicontrollerutil.Controller
	// machineDeleter deletes Machines and returns their deletion resourceVersion.
	machineDeleter capicontrollerutil.ClientWithDeleteResponse
	// etcdDialers connect to the members of a workload cluster's etcd.
	etcdDialers etcdDialerFactory
	// applied remembers the Machine states already applied.
	applied appliedStates
	// owned remembers which fields of each KairosConfig the control plane set.
	owned ownedSpecs
	// bootstrapCRD remembers the installed KairosConfig CRD.
	bootstrapCRD bootstrapProviderCache
	// snapshotListings remembers the last listing of each control plane's snapshot store.
	snapshotListings snapshotListings
	// failureEvents remembers, by Machine uid, the failed in-place update last reported in an
	// event, so that each reason is reported once.
	failureEvents sync.Map

	// Version is this control plane's release (vX.Y.Z), which the version-skew policy compares
	// with the installed bootstrap provider's; empty or "dev" for builds from a source tree.
	Version string
	// Recorder records a Warning event when the control plane cannot create Machines because
	// of the bootstrap provider, and a Normal event on each Machine it starts updating in place;
	// nil records none.
	Recorder record.EventRecorder
	// RuntimeClient calls Cluster API runtime extensions (CanUpdateMachine) to decide whether an
	// outdated Machine is updated in place instead of replaced. nil means Machines are always
	// replaced, as without the InPlaceUpdates feature gate.
	RuntimeClient runtimeclient.Client
}

// joiningRequeue is how soon a control plane whose etcd waits for a joining member is looked at
// again.
const joiningRequeue = time.Second

// defaultHealthInterval is the default HealthInterval.
const defaultHealthInterval = time.Minute

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.ClusterCache == nil {
		return fmt.Errorf("kairoscontrolplane reconciler needs Client, APIReader and ClusterCache")
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "kairoscontrolplane")
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	c, err := capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&controlplanev1.KairosControlPlane{}, builder.WithPredicates(filter)).
		Owns(&clusterv1.Machine{}, filter).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToKairosControlPlane),
			predicates.All(mgr.GetScheme(), log, predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log), filter)).
		// A workload API server that stops answering makes the control plane unavailable.
		WatchesRawSource(r.ClusterCache.GetClusterSource("kairoscontrolplane", clusterToKairosControlPlane,
			clustercache.WatchForProbeFailure(2*time.Minute))).
		WithOptions(options).
		Build(ctx, r)
	if err != nil {
		return fmt.Errorf("setting up the kairoscontrolplane controller: %w", err)
	}
	r.controller = c
	r.machineDeleter, err = capicontrollerutil.NewClientWithDeleteResponse(&clusterv1.Machine{}, clusterv1.GroupVersion.WithResource("machines").GroupResource(),
		mgr.GetScheme(), mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("setting up the Machine client: %w", err)
	}
	if r.etcdDialers == nil {
		r.etcdDialers = newEtcdDialerFactory(ctx)
	}
	if r.HealthInterval <= 0 {
		r.HealthInterval = defaultHealthInterval
	}
	return nil
}

func clusterToKairosControlPlane(_ context.Context, o client.Object) []ctrl.Request {
	c, ok := o.(*clusterv1.Cluster)
	if !ok {
		return nil
	}
	ref := c.Spec.ControlPlaneRef
	if ref.APIGroup != controlplanev1.GroupVersion.Group || ref.Kind != "KairosControlPlane" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}}}
}

// Reconcile brings one KairosControlPlane closer to its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	kcp := &controlplanev1.KairosControlPlane{}
	if err := r.Client.Get(ctx, req.NamespacedName, kcp); err != nil {
		if apierrors.IsNotFound(err) {
			r.controller.ClearConsistencyStore(req.NamespacedName, "")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}

	cluster, err := util.GetOwnerCluster(ctx, r.Client, kcp.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting the owner Cluster: %w", err)
	}
	if cluster == nil {
		log.Info("Waiting for the Cluster controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, kcp); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if kcp.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, kcp, Finalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}

	patchHelper, err := patch.NewHelper(kcp, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	s, err := r.newScope(ctx, kcp, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	compatibleBefore := conditions.Get(kcp, controlplanev1.BootstrapProviderCompatibleCondition)
	defer func() {
		updateStatus(ctx, s)
		r.recordBootstrapProblem(compatibleBefore, kcp)
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: ownedConditions}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := patchHelper.Patch(ctx, kcp, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, fmt.Errorf("patching KairosControlPlane: %w", err)})
		}
	}()

	if !kcp.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

var ownedConditions = []string{
	clusterv1.PausedCondition,
	controlplanev1.AvailableCondition,
	controlplanev1.InitializedCondition,
	controlplanev1.CertificatesAvailableCondition,
	controlplanev1.MachinesReadyCondition,
	controlplanev1.MachinesUpToDateCondition,
	controlplanev1.RollingOutCondition,
	controlplanev1.ScalingUpCondition,
	controlplanev1.ScalingDownCondition,
	controlplanev1.RemediatingCondition,
	controlplanev1.DeletingCondition,
	controlplanev1.EtcdClusterHealthyCondition,
	controlplanev1.BootstrapProviderCompatibleCondition,
}

// newScope gathers the control plane's Machines and their KairosConfigs.
func (r *Reconciler) newScope(ctx context.Context, kcp *controlplanev1.KairosControlPlane, cluster *clusterv1.Cluster) (*scope, error) {
	machines, err := collections.GetFilteredMachinesForCluster(ctx, r.Client, cluster,
		collections.OwnedMachines(kcp, controlplanev1.GroupVersion.WithKind("KairosControlPlane").GroupKind()))
	if err != nil {
		return nil, fmt.Errorf("listing control-plane Machines: %w", err)
	}
	s := &scope{kcp: kcp, cluster: cluster, machines: machines, reconcileTime: time.Now(),
		configs: map[string]*bootstrapv1.KairosConfig{}, ownedConfigs: map[string]*bootstrapv1.KairosConfigSpec{},
		infraMachines: map[string]*unstructured.Unstructured{}}
	for _, m := range machines {
		ref := m.Spec.Bootstrap.ConfigRef
		if ref.Kind != "KairosConfig" {
			continue
		}
		config := &bootstrapv1.KairosConfig{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, config); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading KairosConfig of Machine %s: %w", m.Name, err)
		}
		s.configs[m.Name] = config
		owned, err := r.ownedConfigSpec(ctx, config)
		if err != nil {
			return nil, err
		}
		if owned != nil {
			s.ownedConfigs[m.Name] = owned
		}
	}
	for _, m := range machines {
		infra, err := r.infraMachine(ctx, m)
		if err != nil {
			return nil, err
		}
		if infra != nil {
			s.infraMachines[m.Name] = infra
		}
	}
	if err := r.loadBaseConfig(ctx, s); err != nil {
		return nil, err
	}
	if kcp.DeletionTimestamp.IsZero() {
		if s.bootstrap, err = r.loadBootstrapProvider(ctx); err != nil {
			return nil, err
		}
	}
	if s.initialized() && machines.Len() > 0 && cluster.DeletionTimestamp.IsZero() && kcp.DeletionTimestamp.IsZero() {
		s.etcd = r.observeEtcd(ctx, s)
		r.observeInPlaceFailures(ctx, s)
	}
	health := r.ClusterCache.GetHealthCheckingState(ctx, s.clusterKey())
	s.apiServed = !health.LastProbeSuccessTime.IsZero() && health.ConsecutiveFailures == 0
	return s, nil
}

// reconcileNormal runs the phases in order until one fails or halts (it started an operation
// or has to wait); requeue requests of the phases that ran are combined.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	res, err := phases.Run(ctx, s,
		r.reconcileCertificates,
		r.reconcileTemplateOwnership,
		r.reconcilePrerequisites,
		r.reconcileKubeconfig,
		r.reconcileInitialized,
		r.reconcileEtcdRestore,
		r.reconcileEtcdSnapshotRequest,
		r.reconcileEtcdSnapshots,
		r.reconcileOrphans,
		r.syncMachines,
		r.reconcilePreTerminateHooks,
		r.reconcileEtcdMembers,
		r.reconcileControlPlaneTaints,
		r.completeInPlaceUpdateTriggers,
		r.reconcileRemediation,
		r.reconcileReplicas,
	)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.machines.Len() > 0 {
		res = util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: r.HealthInterval})
	}
	if s.etcd != nil && len(s.etcd.joining) > 0 {
		// A member is joining and etcd has no quorum until it runs: look again soon.
		res = util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: joiningRequeue})
	}
	return res, nil
}

// recordBootstrapProblem records a Warning event when BootstrapProviderCompatible turns False or
// says something new while False: Machines wait for the user to act.
func (r *Reconciler) recordBootstrapProblem(before *metav1.Condition, kcp *controlplanev1.KairosControlPlane) {
	now := conditions.Get(kcp, controlplanev1.BootstrapProviderCompatibleCondition)
	if r.Recorder == nil || now == nil || now.Status != metav1.ConditionFalse {
		return
	}
	if before != nil && before.Status == now.Status && before.Reason == now.Reason && before.Message == now.Message {
		return
	}
	r.Recorder.Event(kcp, corev1.EventTypeWarning, now.Reason, now.Message)
}
