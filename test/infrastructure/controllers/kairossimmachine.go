package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
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

// bootingRequeue is how often a machine whose node is still booting is looked at again, on
// top of the node events.
const bootingRequeue = 5 * time.Second

// MachineReconciler reconciles KairosSimMachines: it hands the Machine's bootstrap data to a
// simulated node and reports what the node makes of it.
type MachineReconciler struct {
	Client client.Client
	// APIReader reads the bootstrap data Secret uncached.
	APIReader        client.Reader
	Registry         *simnode.Registry
	WatchFilterValue string
}

// SetupWithManager registers the reconciler; node status changes trigger reconciles until ctx
// ends.
func (r *MachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.KairosSimMachineList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	events := make(chan event.TypedGenericEvent[*infrav1.KairosSimMachine], 1024)
	unsubscribe := r.Registry.Subscribe(func(e simnode.NodeEvent) {
		if e.Pool != "" {
			return // an instance of a KairosSimMachinePool
		}
		m := &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name}}
		select {
		case events <- event.TypedGenericEvent[*infrav1.KairosSimMachine]{Object: m}:
		default: // the periodic requeue catches up
		}
	})
	go func() {
		<-ctx.Done()
		unsubscribe()
	}()
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.KairosSimMachine{}, builder.WithPredicates(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue))).
		Named("kairossimmachine").
		WithOptions(options).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("KairosSimMachine")))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		WatchesRawSource(source.Channel(events, &handler.TypedEnqueueRequestForObject[*infrav1.KairosSimMachine]{})).
		Complete(r)
}

// Reconcile brings one KairosSimMachine to its desired state.
func (r *MachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	m := &infrav1.KairosSimMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, m.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine == nil {
		if !m.DeletionTimestamp.IsZero() {
			return r.releaseOrphan(ctx, m)
		}
		log.Info("Waiting for the Machine controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Machine", klog.KObj(machine))
	ctx = ctrl.LoggerInto(ctx, log)
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta)
	if err != nil {
		if !m.DeletionTimestamp.IsZero() {
			return r.releaseOrphan(ctx, m)
		}
		log.Info("Machine has no Cluster yet", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, m); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		setSummary(m, infrav1.ProvisionedCondition, infrav1.BootstrapSucceededCondition)
		opts := []patch.Option{patch.WithOwnedConditions{Conditions: []string{
			clusterv1.PausedCondition, infrav1.ReadyCondition, infrav1.ProvisionedCondition, infrav1.BootstrapSucceededCondition,
		}}}
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := helper.Patch(ctx, m, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !m.DeletionTimestamp.IsZero() {
		r.Registry.StopNode(nodeKey(m))
		m.Status.NodePhase = string(simnode.PhaseStopped)
		conditions.Set(m, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
		conditions.Set(m, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
		controllerutil.RemoveFinalizer(m, infrav1.Finalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(m, infrav1.Finalizer) {
		return ctrl.Result{}, nil
	}
	return r.reconcileNormal(ctx, cluster, machine, m)
}

// releaseOrphan lets a KairosSimMachine without Machine or Cluster go.
func (r *MachineReconciler) releaseOrphan(ctx context.Context, m *infrav1.KairosSimMachine) (ctrl.Result, error) {
	r.Registry.StopNode(nodeKey(m))
	if !controllerutil.ContainsFinalizer(m, infrav1.Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := m.DeepCopy()
	controllerutil.RemoveFinalizer(m, infrav1.Finalizer)
	return ctrl.Result{}, r.Client.Patch(ctx, m, client.MergeFrom(orig))
}

func (r *MachineReconciler) reconcileNormal(ctx context.Context, cluster *clusterv1.Cluster, machine *clusterv1.Machine, m *infrav1.KairosSimMachine) (ctrl.Result, error) {
	waiting := func(reason, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		conditions.Set(m, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
		conditions.Set(m, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
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
	if machine.Spec.Bootstrap.DataSecretName == nil {
		waiting(infrav1.WaitingForBootstrapDataReason, "Machine %s has no bootstrap data yet", machine.Name)
		return ctrl.Result{}, nil
	}

	providerID, systemUUID := providerIDOf(m)
	node := r.Registry.Node(providerID)
	if node == nil || node.Status().Phase == simnode.PhaseStopped {
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: m.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}
		if err := r.APIReader.Get(ctx, key, secret); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading bootstrap data Secret %s: %w", key.Name, err)
		}
		data, ok := secret.Data["value"]
		if !ok {
			return ctrl.Result{}, fmt.Errorf("bootstrap data Secret %s has no value key", key.Name)
		}
		backend, vip, err := r.endpointKind(ctx, cluster)
		if err != nil {
			return ctrl.Result{}, err
		}
		node, err = r.Registry.StartNode(simnode.NodeSpec{
			Namespace: m.Namespace, Name: m.Name, ProviderID: providerID,
			Endpoint:         net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))),
			APIBackendPort:   backend,
			EndpointIsVIP:    vip,
			SystemUUID:       systemUUID,
			Files:            datasourceFiles(m),
			Data:             data,
			InstalledVersion: m.Spec.InstalledVersion,
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Handed the bootstrap data to the node", "providerID", providerID)
	}

	m.Spec.ProviderID = providerID
	fd := machine.Spec.FailureDomain
	if fd == "" {
		fd = m.Spec.FailureDomain
	}
	m.Status.FailureDomain = fd
	st := node.Status()
	hostname := st.NodeName
	if hostname == "" {
		hostname = m.Name
	}
	// The machine's own address, as a real provider reports it once the machine runs (through
	// its guest agent, which a stalled node has not started yet).
	m.Status.Addresses = nil
	if !node.AddressesHidden() {
		m.Status.Addresses = []clusterv1.MachineAddress{
			{Type: clusterv1.MachineInternalIP, Address: node.IP()},
			{Type: clusterv1.MachineHostName, Address: hostname},
		}
	}
	m.Status.NodeName = st.NodeName
	m.Status.NodePhase = string(st.Phase)
	m.Status.Initialization.Provisioned = ptr.To(true)
	conditions.Set(m, metav1.Condition{Type: infrav1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason})

	if st.Sentinel {
		conditions.Set(m, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionTrue, Reason: st.Reason, Message: st.Message})
		return ctrl.Result{}, nil
	}
	conditions.Set(m, metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: st.Reason, Message: st.Message})
	if st.Phase == simnode.PhaseBooting {
		return ctrl.Result{RequeueAfter: bootingRequeue}, nil
	}
	return ctrl.Result{}, nil
}

// endpointKind says what answers on the cluster's endpoint: a load balancer forwarding to
// backendPort on the control-plane nodes (0: the nodes serve the endpoint's port), or, with vip,
// whichever control-plane node holds the endpoint as a virtual IP.
func (r *MachineReconciler) endpointKind(ctx context.Context, cluster *clusterv1.Cluster) (backendPort int, vip bool, err error) {
	ref := cluster.Spec.InfrastructureRef
	if ref.Kind != "KairosSimCluster" || ref.APIGroup != infrav1.GroupVersion.Group {
		return 0, false, nil
	}
	sc := &infrav1.KairosSimCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, sc); err != nil {
		return 0, false, fmt.Errorf("reading KairosSimCluster %s: %w", ref.Name, err)
	}
	if sc.Spec.LoadBalancer != nil {
		backendPort = int(sc.Spec.LoadBalancer.BackendPort)
	}
	return backendPort, sc.Spec.VirtualIP, nil
}

// datasourceFiles are the files a Kairos node's datasource extracts from its machine's
// infrastructure, besides the bootstrap data. Kairos reads its cloud-config with yip's
// datasource providers (github.com/mudler/yip pkg/plugins/datasourceProviders): on vSphere the
// VMware provider also writes the guestinfo.metadata CAPV sets (instance-id, local-hostname,
// network) to /run/config/metadata; the config-drive and NoCloud providers (Proxmox, KubeVirt,
// Metal3) read only the user data, so their metadata stays on the drive.
func datasourceFiles(m *infrav1.KairosSimMachine) map[string]string {
	if m.Spec.ProviderIDConvention != infrav1.ProviderIDVSphere {
		return nil
	}
	return map[string]string{VSphereMetadataPath: fmt.Sprintf("instance-id: %q\nlocal-hostname: %q\nwait-on-network:\n  ipv4: true\nnetwork:\n  version: 2\n  ethernets:\n    id0:\n      match:\n        name: \"e*\"\n      dhcp4: true\n", m.Name, m.Name)}
}

// VSphereMetadataPath is where yip's VMware datasource writes a VM's guestinfo metadata.
const VSphereMetadataPath = "/run/config/metadata"

// providerIDOf is the machine's provider ID in its convention, and the DMI product UUID of the
// machine: its UID, a UUID that never changes while the machine exists (what a hypervisor's
// BIOS UUID is to its VM).
func providerIDOf(m *infrav1.KairosSimMachine) (providerID, systemUUID string) {
	systemUUID = strings.ToLower(string(m.UID))
	switch m.Spec.ProviderIDConvention {
	case infrav1.ProviderIDVSphere:
		return "vsphere://" + systemUUID, systemUUID
	case infrav1.ProviderIDProxmox:
		return "proxmox://" + systemUUID, systemUUID
	case infrav1.ProviderIDKubeVirt:
		return "kubevirt://" + m.Name, systemUUID
	case infrav1.ProviderIDMetal3:
		return "metal3://" + m.Namespace + "/bmh-" + m.Name + "/" + m.Name, systemUUID
	default:
		return simnode.ProviderID(m.Namespace, m.Name), systemUUID
	}
}

// nodeKey is the provider ID the machine's node was registered under.
func nodeKey(m *infrav1.KairosSimMachine) string {
	if m.Spec.ProviderID != "" {
		return m.Spec.ProviderID
	}
	id, _ := providerIDOf(m)
	return id
}
