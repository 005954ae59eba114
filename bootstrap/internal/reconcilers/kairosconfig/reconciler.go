// Package kairosconfig reconciles KairosConfigs: it waits until everything a node needs
// exists, renders the node's Kairos document once, and stores it in the bootstrap data Secret
// Cluster API hands to the infrastructure provider.
package kairosconfig

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/initlock"
	"github.com/kairos-capi/kairos-capi/common/provider/phases"
)

// DefaultTokenTTL is how long a generated join token stays valid without a refresh.
const DefaultTokenTTL = 15 * time.Minute

// waitRequeue is how often waits that no watch covers (Secrets referenced by users, the
// workload cluster becoming reachable) are retried.
const waitRequeue = 10 * time.Second

// notConnectedRequeue is how soon a reconcile that found the workload cluster not connected
// yet (a manager that just started) tries again; the ClusterCache connects within seconds.
const notConnectedRequeue = 2 * time.Second

// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kairosconfigs;kairosconfigs/status;kairosconfigs/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status;machines;machines/status;machinepools;machinepools/status,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles KairosConfigs.
type Reconciler struct {
	// Client reads through the manager's cache (Secrets only when they carry the cluster-name label).
	Client client.Client
	// APIReader reads uncached: Secrets referenced by users and the init lock.
	APIReader client.Reader
	// ClusterCache reaches workload clusters; used unless Tokens is set.
	ClusterCache clustercache.ClusterCache
	// Tokens creates k0s bootstrap tokens in workload clusters. Defaults to ClusterCache.
	Tokens WorkloadTokens
	// Nodes gives workload Nodes their Machines' provider IDs. Defaults to ClusterCache.
	Nodes WorkloadNodes
	// WatchFilterValue restricts reconciliation to objects carrying this watch-filter label.
	WatchFilterValue string
	// TokenTTL is the lifetime of generated join tokens. Defaults to DefaultTokenTTL.
	TokenTTL time.Duration
	// Now is the clock token expirations are computed from. Defaults to time.Now.
	Now func() time.Time
	// Recorder records a Warning event when a config cannot get its data; nil records none.
	Recorder record.EventRecorder

	initLock *initlock.Lock
	// controller defers reconciles until the cache has seen this controller's writes.
	controller capicontrollerutil.Controller
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || (r.ClusterCache == nil && r.Tokens == nil) {
		return fmt.Errorf("kairosconfig reconciler needs Client, APIReader and ClusterCache or Tokens")
	}
	r.complete()

	log := ctrl.LoggerFrom(ctx).WithValues("controller", "kairosconfig")
	filter := predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)
	b := capicontrollerutil.NewControllerManagedBy(mgr, log).
		For(&bootstrapv1.KairosConfig{}, builder.WithPredicates(filter)).
		WithOptions(options).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToConfig), filter).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToConfigs), clusterChangedForBootstrap{}, filter).
		// Data Secrets, cluster certificates and k3s tokens carry the cluster-name label, so the
		// label-selected cache sees them. They carry no watch-filter label: the mapping filters
		// the KairosConfigs instead.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToConfigs), dataSecretDeletedOrOtherSecret{})
	if feature.Gates.Enabled(feature.MachinePool) {
		b = b.Watches(&clusterv1.MachinePool{}, handler.EnqueueRequestsFromMapFunc(machinePoolToConfig), filter)
	}
	if r.ClusterCache != nil {
		b = b.WatchesRawSource(r.ClusterCache.GetClusterSource("kairosconfig", r.clusterToConfigs))
	}
	c, err := b.Build(ctx, r)
	if err != nil {
		return fmt.Errorf("setting up the kairosconfig controller: %w", err)
	}
	r.controller = c
	return nil
}

// deferUntilCached makes the next reconcile of config wait until the cache has seen what this one
// wrote: a reconcile from a stale cache would not find the data Secret (and render again) or
// would recompute a status already written (and patch it again).
func (r *Reconciler) deferUntilCached(config *bootstrapv1.KairosConfig, gvkt capicontrollerutil.GroupVersionKindType, resourceVersion string) {
	if r.controller != nil && resourceVersion != "" {
		r.controller.DeferNextReconcileUntilCacheUpToDate(config, gvkt, resourceVersion)
	}
}

// retryOnceConnected is what a reconcile returns when the workload cluster is not connected
// yet (a manager that just started) and it did nothing else. The ClusterCache enqueues every
// config of a Cluster when it connects (GetClusterSource), usually milliseconds later; Cluster
// API's controller wrapper would hold that reconcile back for the rest of its per-object rate
// limit (one reconcile a second), so the reconcile that did nothing gives its slot back. In a
// storm of 200 new configs this was about 1 s of 4 (make bench-e2e, the trace of -keep).
func (r *Reconciler) retryOnceConnected(s *scope) ctrl.Result {
	if r.controller != nil {
		r.controller.DeferNextReconcileForObject(s.config, time.Time{})
	}
	return ctrl.Result{RequeueAfter: notConnectedRequeue}
}

// Reconcile brings one KairosConfig closer to having its bootstrap data.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)

	config := &bootstrapv1.KairosConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, config); err != nil {
		if apierrors.IsNotFound(err) && r.controller != nil {
			r.controller.ClearConsistencyStore(req.NamespacedName, "")
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	// A KairosConfig that Cluster API is updating in place (contract "BootstrapConfig: support
	// for in-place changes": the update extension applies the change to the node; the bootstrap
	// provider "should ignore in-place changes and do not re-generate the bootstrap config") is
	// left alone until the annotation goes: no data, no token, no status written. Its data
	// Secret already exists (only provisioned Machines are updated in place), and data that
	// exists is never rendered again anyway (reconcileExistingData).
	if _, ok := config.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
		log.V(4).Info("Cluster API is updating the Machine in place, leaving its KairosConfig alone")
		return ctrl.Result{}, nil
	}

	owner, err := getConfigOwner(ctx, r.Client, config)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // the owner event brings us back
		}
		return ctrl.Result{}, err
	}
	if owner == nil {
		return ctrl.Result{}, nil // Cluster API sets the owner reference; that event brings us back
	}
	log = log.WithValues(owner.kind(), klog.KObj(owner.object()), "Cluster", klog.KRef(config.Namespace, owner.clusterName()))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster, err := util.GetClusterByName(ctx, r.Client, config.Namespace, owner.clusterName())
	if err != nil {
		if apierrors.IsNotFound(err) {
			log.Info("Cluster does not exist yet, waiting until it is created")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting Cluster: %w", err)
	}

	if annotations.IsPaused(cluster, config) {
		_, _, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, config)
		return ctrl.Result{}, err
	}

	// Everything this reconciliation decides about status goes out in one merge patch of the
	// status subresource: the Paused condition (paused.EnsurePausedCondition would patch it and
	// requeue on its own), conditions and the other status fields (CAPI's patch helper sends
	// conditions and the rest as two patches). Only this controller writes a KairosConfig's
	// status, so the helper's conflict-aware merge of other writers' conditions buys nothing,
	// and a new worker's config costs one status write instead of four.
	before := config.DeepCopy()
	conditions.Set(config, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse,
		Reason: clusterv1.NotPausedReason, ObservedGeneration: config.Generation})
	s := &scope{config: config, owner: owner, cluster: cluster}
	defer func() {
		if s.keepStatus && reterr == nil {
			return
		}
		if err := updateStatus(s); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		r.recordProblem(before, config)
		if reterr == nil {
			config.Status.ObservedGeneration = config.Generation
		}
		if equality.Semantic.DeepEqual(before.Status, config.Status) {
			return
		}
		if err := r.Client.Status().Patch(ctx, config, client.MergeFrom(before)); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, fmt.Errorf("patching KairosConfig status: %w", err)})
			return
		}
		r.deferUntilCached(config, capicontrollerutil.StructuredObject(bootstrapv1.GroupVersion, "KairosConfig"), config.ResourceVersion)
	}()

	if !config.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the data Secret goes with its owner reference
	}
	return r.reconcileNormal(ctx, s)
}

// reconcileNormal runs the phases in order until one fails, waits or finishes the work.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	return phases.Run(ctx, s,
		r.reconcileExistingData,
		r.reconcilePrerequisites,
		r.reconcileReferencedSecrets,
		r.reconcileCredentials,
		r.reconcileDataSecret,
	)
}

// updateStatus derives the whole status from what the phases observed.
func updateStatus(s *scope) error {
	c := s.config
	setOrDelete(c, bootstrapv1.JoinTokenAvailableCondition, s.joinToken)
	setOrDelete(c, bootstrapv1.NodeProviderIDCondition, s.nodeProviderID)
	if s.dataSecretName != "" {
		c.Status.DataSecretName = s.dataSecretName
		c.Status.Initialization.DataSecretCreated = ptr.To(true)
		conditions.Set(c, metav1.Condition{
			Type:   bootstrapv1.DataSecretAvailableCondition,
			Status: metav1.ConditionTrue,
			Reason: bootstrapv1.DataSecretAvailableReason,
		})
	} else if s.waitReason != "" {
		conditions.Set(c, metav1.Condition{
			Type:    bootstrapv1.DataSecretAvailableCondition,
			Status:  metav1.ConditionFalse,
			Reason:  s.waitReason,
			Message: s.waitMessage,
		})
	}
	return conditions.SetSummaryCondition(c, c, bootstrapv1.ReadyCondition,
		conditions.ForConditionTypes{bootstrapv1.DataSecretAvailableCondition},
		conditions.CustomMergeStrategy{MergeStrategy: conditions.DefaultMergeStrategy(
			conditions.ComputeReasonFunc(conditions.GetDefaultComputeMergeReasonFunc(
				bootstrapv1.NotReadyReason, bootstrapv1.ReadyUnknownReason, bootstrapv1.ReadyReason)),
		)},
	)
}

// problemReasons are the DataSecretAvailable reasons that need a user: the spec (or the
// Cluster) cannot render, or the data was deleted after a node may have used it.
var problemReasons = []string{bootstrapv1.InvalidConfigurationReason, bootstrapv1.DataSecretCreationFailedReason}

// recordProblem records a Warning event when a config newly reports a problem a user must fix,
// once per distinct problem (not on every retry).
func (r *Reconciler) recordProblem(before, after *bootstrapv1.KairosConfig) {
	now := conditions.Get(after, bootstrapv1.DataSecretAvailableCondition)
	if r.Recorder == nil || now == nil || now.Status != metav1.ConditionFalse || !slices.Contains(problemReasons, now.Reason) {
		return
	}
	if was := conditions.Get(before, bootstrapv1.DataSecretAvailableCondition); was != nil && was.Reason == now.Reason && was.Message == now.Message {
		return
	}
	r.Recorder.Event(after, corev1.EventTypeWarning, now.Reason, now.Message)
}

// setOrDelete sets a condition a phase observed, or removes it when the phase found it does
// not apply.
func setOrDelete(c *bootstrapv1.KairosConfig, typ string, cond *metav1.Condition) {
	if cond != nil {
		conditions.Set(c, *cond)
		return
	}
	conditions.Delete(c, typ)
}

func machineToConfig(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	return configRequest(m.Namespace, m.Spec.Bootstrap.ConfigRef)
}

func machinePoolToConfig(_ context.Context, o client.Object) []ctrl.Request {
	p, ok := o.(*clusterv1.MachinePool)
	if !ok {
		return nil
	}
	return configRequest(p.Namespace, p.Spec.Template.Spec.Bootstrap.ConfigRef)
}

func configRequest(namespace string, ref clusterv1.ContractVersionedObjectReference) []ctrl.Request {
	if ref.APIGroup != bootstrapv1.GroupVersion.Group || ref.Kind != "KairosConfig" || ref.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: namespace, Name: ref.Name}}}
}

func (r *Reconciler) clusterToConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	configs := &bootstrapv1.KairosConfigList{}
	if err := r.Client.List(ctx, configs, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing KairosConfigs of a Cluster", "Cluster", klog.KObj(o))
		return nil
	}
	return r.requestsFor(configs.Items)
}

// requestsFor returns requests for the configs that carry this manager's watch filter: the
// mapping functions see objects of other managers too.
func (r *Reconciler) requestsFor(configs []bootstrapv1.KairosConfig) []ctrl.Request {
	var reqs []ctrl.Request
	for i := range configs {
		if r.WatchFilterValue == "" || configs[i].Labels[clusterv1.WatchLabel] == r.WatchFilterValue {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&configs[i])})
		}
	}
	return reqs
}

// secretToConfigs wakes the KairosConfig controlling a bootstrap data Secret (so that its
// deletion is reported), and the configs of a cluster still waiting for its certificates or
// token when one of those appears.
func (r *Reconciler) secretToConfigs(ctx context.Context, o client.Object) []ctrl.Request {
	configs := &bootstrapv1.KairosConfigList{}
	if owner := metav1.GetControllerOf(o); owner != nil && owner.Kind == "KairosConfig" {
		config := &bootstrapv1.KairosConfig{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: owner.Name}, config); err != nil {
			return nil
		}
		configs.Items = append(configs.Items, *config)
	} else if clusterName := o.GetLabels()[clusterv1.ClusterNameLabel]; clusterName != "" {
		if err := r.Client.List(ctx, configs, client.InNamespace(o.GetNamespace()),
			client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err != nil {
			return nil
		}
		configs.Items = slices.DeleteFunc(configs.Items, func(c bootstrapv1.KairosConfig) bool {
			return ptr.Deref(c.Status.Initialization.DataSecretCreated, false)
		})
	}
	return r.requestsFor(configs.Items)
}

// clusterChangedForBootstrap passes Cluster updates that can unblock rendering: pause,
// infrastructure, endpoint and control-plane initialization changes.
type clusterChangedForBootstrap struct{ predicate.Funcs }

func (clusterChangedForBootstrap) Update(e event.UpdateEvent) bool {
	oldC, ok1 := e.ObjectOld.(*clusterv1.Cluster)
	newC, ok2 := e.ObjectNew.(*clusterv1.Cluster)
	if !ok1 || !ok2 {
		return false
	}
	return ptr.Deref(oldC.Spec.Paused, false) != ptr.Deref(newC.Spec.Paused, false) ||
		ptr.Deref(oldC.Status.Initialization.InfrastructureProvisioned, false) != ptr.Deref(newC.Status.Initialization.InfrastructureProvisioned, false) ||
		controlPlaneInitialized(oldC) != controlPlaneInitialized(newC) ||
		oldC.Spec.ControlPlaneEndpoint != newC.Spec.ControlPlaneEndpoint
}

func (clusterChangedForBootstrap) Create(event.CreateEvent) bool   { return true }
func (clusterChangedForBootstrap) Delete(event.DeleteEvent) bool   { return false }
func (clusterChangedForBootstrap) Generic(event.GenericEvent) bool { return false }

// dataSecretDeletedOrOtherSecret passes every event of cluster Secrets (certificates, k3s
// tokens: configs may be waiting for them) but only the deletion of a bootstrap data Secret:
// its creation and updates come from the controller itself, and the reconcile they would cause
// has nothing to do.
type dataSecretDeletedOrOtherSecret struct{ predicate.Funcs }

func isDataSecret(o client.Object) bool {
	owner := metav1.GetControllerOf(o)
	return owner != nil && owner.Kind == "KairosConfig" && strings.HasPrefix(owner.APIVersion, bootstrapv1.GroupVersion.Group+"/")
}

func (dataSecretDeletedOrOtherSecret) Create(e event.CreateEvent) bool {
	return !isDataSecret(e.Object)
}
func (dataSecretDeletedOrOtherSecret) Update(e event.UpdateEvent) bool {
	return !isDataSecret(e.ObjectNew)
}
func (dataSecretDeletedOrOtherSecret) Delete(event.DeleteEvent) bool   { return true }
func (dataSecretDeletedOrOtherSecret) Generic(event.GenericEvent) bool { return false }
