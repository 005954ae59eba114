package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// ClusterReconciler reconciles KairosSimClusters: it allocates the control-plane endpoint,
// publishes the failure domains, and stops the workload API server when the object goes.
type ClusterReconciler struct {
	Client           client.Client
	Registry         *simnode.Registry
	WatchFilterValue string
}

// SetupWithManager registers the reconciler.
func (r *ClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.KairosSimCluster{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("kairossimcluster").
		WithOptions(options).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("KairosSimCluster"), mgr.GetClient(), &infrav1.KairosSimCluster{})),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log)),
		).
		Complete(r)
}

// Reconcile brings one KairosSimCluster to its desired state.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	sc := &infrav1.KairosSimCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, sc.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cluster == nil {
		log.Info("Waiting for the Cluster controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, sc); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	helper, err := patch.NewHelper(sc, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		setSummary(sc, infrav1.ProvisionedCondition)
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
			clusterv1.PausedCondition, infrav1.ReadyCondition, infrav1.ProvisionedCondition,
		}}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := helper.Patch(ctx, sc, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !sc.DeletionTimestamp.IsZero() {
		if ep := sc.Spec.ControlPlaneEndpoint; ep.IsValid() {
			r.Registry.StopCluster(net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))))
		}
		conditions.Set(sc, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
		controllerutil.RemoveFinalizer(sc, infrav1.Finalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(sc, infrav1.Finalizer) {
		return ctrl.Result{}, nil // the patch persists the finalizer before anything is allocated
	}

	if !sc.Spec.ControlPlaneEndpoint.IsValid() {
		host, port, err := r.Registry.ReserveEndpoint()
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("allocating the control-plane endpoint: %w", err)
		}
		sc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: host, Port: port}
		log.Info("Allocated the control-plane endpoint", "endpoint", net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	sc.Status.FailureDomains = nil
	for _, fd := range sc.Spec.FailureDomains {
		sc.Status.FailureDomains = append(sc.Status.FailureDomains, clusterv1.FailureDomain{
			Name: fd.Name, ControlPlane: fd.ControlPlane, Attributes: fd.Attributes,
		})
	}
	sc.Status.Initialization.Provisioned = ptr.To(true)
	conditions.Set(sc, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason})
	return ctrl.Result{}, nil
}

// setSummary sets Ready from the given condition types.
func setSummary(obj conditions.Setter, types ...string) {
	_ = conditions.SetSummaryCondition(obj, obj, infrav1.ReadyCondition,
		conditions.ForConditionTypes(types),
		conditions.CustomMergeStrategy{MergeStrategy: conditions.DefaultMergeStrategy(
			conditions.ComputeReasonFunc(conditions.GetDefaultComputeMergeReasonFunc(
				infrav1.NotReadyReason, infrav1.ReadyUnknownReason, infrav1.ReadyReason)),
		)},
	)
}
