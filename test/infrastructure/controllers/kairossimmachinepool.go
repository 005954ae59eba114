package controllers

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"

	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// MachinePoolReconciler reconciles KairosSimMachinePools the way a cloud's scaling group
// behaves under Cluster API's InfraMachinePool contract (cluster-api v1.14
// docs/book/src/developer/providers/contracts/infra-machinepool.md): it keeps one simulated
// node per replica of the owning MachinePool, every node booting from the MachinePool's one
// bootstrap data Secret, and reports the nodes' provider IDs in spec.providerIDList and their
// number in status.replicas. A node is started only when the pool has fewer nodes than
// replicas and is never restarted: a pool adds machines, it does not re-run old ones.
type MachinePoolReconciler struct {
	Client client.Client
	// APIReader reads the bootstrap data Secret uncached.
	APIReader        client.Reader
	Registry         *simnode.Registry
	WatchFilterValue string
}

// SetupWithManager registers the reconciler; node status changes trigger reconciles until ctx
// ends.
func (r *MachinePoolReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	clusterToPools, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.KairosSimMachinePoolList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	events := make(chan event.TypedGenericEvent[*infrav1.KairosSimMachinePool], 1024)
	unsubscribe := r.Registry.Subscribe(func(e simnode.NodeEvent) {
		if e.Pool == "" {
			return // the node of a KairosSimMachine
		}
		p := &infrav1.KairosSimMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Pool}}
		select {
		case events <- event.TypedGenericEvent[*infrav1.KairosSimMachinePool]{Object: p}:
		default: // the periodic requeue catches up
		}
	})
	go func() {
		<-ctx.Done()
		unsubscribe()
	}()
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.KairosSimMachinePool{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("kairossimmachinepool").
		WithOptions(options).
		// spec.replicas lives on the MachinePool: scaling it must reach the pool.
		Watches(&clusterv1.MachinePool{},
			handler.EnqueueRequestsFromMapFunc(util.MachinePoolToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("KairosSimMachinePool")))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToPools),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		WatchesRawSource(source.Channel(events, &handler.TypedEnqueueRequestForObject[*infrav1.KairosSimMachinePool]{})).
		Complete(r)
}

// Reconcile brings one KairosSimMachinePool to its desired state.
func (r *MachinePoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	p := &infrav1.KairosSimMachinePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	mp, err := util.GetOwnerMachinePool(ctx, r.Client, p.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && !p.DeletionTimestamp.IsZero() {
			return r.releaseOrphan(ctx, p)
		}
		return ctrl.Result{}, err
	}
	if mp == nil {
		if !p.DeletionTimestamp.IsZero() {
			return r.releaseOrphan(ctx, p)
		}
		log.Info("Waiting for the MachinePool controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("MachinePool", klog.KObj(mp))
	ctx = ctrl.LoggerInto(ctx, log)
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, mp.ObjectMeta)
	if err != nil {
		if !p.DeletionTimestamp.IsZero() {
			return r.releaseOrphan(ctx, p)
		}
		log.Info("MachinePool has no Cluster yet", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, p); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	helper, err := patch.NewHelper(p, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		setSummary(p, infrav1.ProvisionedCondition, infrav1.BootstrapSucceededCondition)
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
			clusterv1.PausedCondition, infrav1.ReadyCondition, infrav1.ProvisionedCondition, infrav1.BootstrapSucceededCondition,
		}}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := helper.Patch(ctx, p, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !p.DeletionTimestamp.IsZero() {
		r.stopAll(p)
		p.Spec.ProviderIDList, p.Status.Replicas, p.Status.Instances = nil, ptr.To[int32](0), nil
		conditions.Set(p, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
		conditions.Set(p, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
		controllerutil.RemoveFinalizer(p, infrav1.Finalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(p, infrav1.Finalizer) {
		return ctrl.Result{}, nil // the patch persists the finalizer before any machine starts
	}
	return r.reconcileNormal(ctx, cluster, mp, p)
}

// releaseOrphan lets a KairosSimMachinePool without MachinePool or Cluster go.
func (r *MachinePoolReconciler) releaseOrphan(ctx context.Context, p *infrav1.KairosSimMachinePool) (ctrl.Result, error) {
	r.stopAll(p)
	if !controllerutil.ContainsFinalizer(p, infrav1.Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, infrav1.Finalizer)
	return ctrl.Result{}, r.Client.Patch(ctx, p, client.MergeFrom(orig))
}

func (r *MachinePoolReconciler) stopAll(p *infrav1.KairosSimMachinePool) {
	for _, n := range r.Registry.PoolNodes(p.Namespace, p.Name) {
		r.Registry.StopNode(n.ProviderID())
	}
}

func (r *MachinePoolReconciler) reconcileNormal(ctx context.Context, cluster *clusterv1.Cluster, mp *clusterv1.MachinePool, p *infrav1.KairosSimMachinePool) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	waiting := func(reason, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		conditions.Set(p, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
		conditions.Set(p, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	}
	if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		waiting(infrav1.WaitingForClusterInfrastructureReason, "Cluster %s infrastructure is not provisioned yet", cluster.Name)
		return ctrl.Result{}, nil
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		waiting(infrav1.WaitingForControlPlaneEndpointReason, "Cluster %s has no control-plane endpoint yet", cluster.Name)
		return ctrl.Result{}, nil
	}
	secretName := mp.Spec.Template.Spec.Bootstrap.DataSecretName
	if secretName == nil {
		waiting(infrav1.WaitingForBootstrapDataReason, "MachinePool %s has no bootstrap data yet", mp.Name)
		return ctrl.Result{}, nil
	}

	nodes := r.Registry.PoolNodes(p.Namespace, p.Name)
	desired := int(ptr.Deref(mp.Spec.Replicas, 0))
	if surplus := len(nodes) - desired; surplus > 0 {
		// Scale down: switch off the machines that are least far along first (a node that
		// never joined serves nobody), the newest among equals.
		sort.SliceStable(nodes, func(i, j int) bool {
			bi, bj := nodes[i].Status().Sentinel, nodes[j].Status().Sentinel
			if bi != bj {
				return !bi
			}
			return nodes[i].ProviderID() > nodes[j].ProviderID()
		})
		for _, n := range nodes[:surplus] {
			log.Info("Stopping a machine of the pool", "providerID", n.ProviderID())
			r.Registry.StopNode(n.ProviderID())
		}
		nodes = nodes[surplus:]
	}
	if missing := desired - len(nodes); missing > 0 {
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: p.Namespace, Name: *secretName}
		if err := r.APIReader.Get(ctx, key, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading bootstrap data Secret %s: %w", key.Name, err)
		}
		data, ok := secret.Data["value"]
		if !ok {
			return ctrl.Result{}, fmt.Errorf("bootstrap data Secret %s has no value key", key.Name)
		}
		endpoint := net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
		for range missing {
			name := r.newInstanceName(p)
			n, err := r.Registry.StartNode(simnode.NodeSpec{
				Namespace: p.Namespace, Name: name, Pool: p.Name, ProviderID: simnode.ProviderID(p.Namespace, name),
				Endpoint: endpoint, Data: data, InstalledVersion: p.Spec.InstalledVersion,
			})
			if err != nil {
				return ctrl.Result{}, err
			}
			log.Info("Started a machine of the pool with its bootstrap data", "providerID", n.ProviderID(), "dataSecret", key.Name)
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ProviderID() < nodes[j].ProviderID() })

	p.Spec.ProviderIDList = nil
	p.Status.Instances = nil
	var booting bool
	var notBootstrapped []string
	for _, n := range nodes {
		st := n.Status()
		hostname := st.NodeName
		if hostname == "" {
			hostname = n.Spec().Name
		}
		p.Spec.ProviderIDList = append(p.Spec.ProviderIDList, n.ProviderID())
		p.Status.Instances = append(p.Status.Instances, infrav1.KairosSimMachinePoolInstance{
			InstanceName: n.Spec().Name,
			ProviderID:   n.ProviderID(),
			Addresses: []clusterv1.MachineAddress{
				{Type: clusterv1.MachineInternalIP, Address: n.IP()},
				{Type: clusterv1.MachineHostName, Address: hostname},
			},
			NodeName:     st.NodeName,
			NodePhase:    string(st.Phase),
			Reason:       st.Reason,
			Message:      truncate(st.Message, 10240),
			Bootstrapped: st.Sentinel,
		})
		// The pool's machines share one document, which cannot carry each machine's provider
		// ID: like the infrastructures that offer machine pools (cloud auto-scaling groups),
		// the simulated one runs a cloud controller that gives each registered Node its ID.
		if err := n.RunCloudNodeController(ctx, n.ProviderID()); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting the provider ID of the Node of %s: %w", n.Spec().Name, err)
		}
		if !st.Sentinel {
			notBootstrapped = append(notBootstrapped, fmt.Sprintf("%s: %s (%s)", n.Spec().Name, st.Reason, st.Message))
		}
		booting = booting || st.Phase == simnode.PhaseBooting
	}
	p.Status.Replicas = ptr.To(int32(len(nodes)))
	// Provisioned once the pool exists and its machines were handed the data; it does not go
	// back when the pool scales (initialization happens once, per the contract).
	p.Status.Initialization.Provisioned = ptr.To(true)
	p.Status.Ready = ptr.To(true)
	conditions.Set(p, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason})
	if len(notBootstrapped) == 0 {
		conditions.Set(p, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.InstancesBootstrappedReason, Message: fmt.Sprintf("%d of %d machines bootstrapped", len(nodes), desired)})
	} else {
		conditions.Set(p, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.InstancesNotBootstrappedReason, Message: truncate(strings.Join(notBootstrapped, "; "), 10240)})
	}
	if booting {
		return ctrl.Result{RequeueAfter: bootingRequeue}, nil
	}
	return ctrl.Result{}, nil
}

// newInstanceName names a new machine of the pool: <pool>-<random>, unused by any node the
// registry ever had (so that no stopped node is ever started again).
func (r *MachinePoolReconciler) newInstanceName(p *infrav1.KairosSimMachinePool) string {
	for {
		name := p.Name + "-" + rand.String(5)
		if r.Registry.Node(simnode.ProviderID(p.Namespace, name)) == nil {
			return name
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
