package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	capisetup "sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/index"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/test/fleet"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// capiUserAgent is the source name of the in-process Cluster API core in its workload clients'
// user agent (remote.DefaultClusterAPIUserAgent).
const capiUserAgent = "bench-fleet-cluster-api"

// Cluster API's defaults (its main.go flags, v1.14): --remote-connection-grace-period 50s,
// --remote-conditions-grace-period 5m, --cluster-concurrency and --machine-concurrency 10,
// --clustercache-client-qps 20 and -burst 30, --sync-period 10m.
const (
	capiRemoteConnectionGracePeriod = 50 * time.Second
	capiRemoteConditionsGracePeriod = 5 * time.Minute
	capiConcurrency                 = 10
	capiSyncPeriod                  = 10 * time.Minute
)

// site is one simulated workload cluster, prepared before its Cluster exists: its CAs (given to
// the management cluster as <cluster>-ca and <cluster>-etcd) and its API server's listener (the
// Cluster's controlPlaneEndpoint). It boots, which starts the fleet's cluster with its Node named
// after the Machine, when the Machine has its bootstrap data, as a real machine does.
type site struct {
	name     string
	dist     fleet.Distribution
	ca, etcd *pki.KeyPair
	listener *net.TCPListener

	mu      sync.Mutex
	cluster *fleet.Cluster
	// bootErr is why the site could not boot (its listener is then closed: it cannot retry).
	bootErr error
	// refusing is closed to stop refuse; refused is closed when it returned.
	refusing, refused chan struct{}
	stopOnce          sync.Once
}

// newSite opens the site's API listener and refuses connections on it until the site boots.
func newSite(name string, dist fleet.Distribution, ca, etcd *pki.KeyPair) (*site, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("listening for site %s: %w", name, err)
	}
	s := &site{name: name, dist: dist, ca: ca, etcd: etcd, listener: ln, refusing: make(chan struct{}), refused: make(chan struct{})}
	go s.refuse()
	return s, nil
}

// refuse closes every connection until the site boots, so that a client that tries the
// endpoint of a machine not booted yet fails at once, as from a closed port, instead of waiting
// out its timeout on a connection the kernel accepted for a listener nobody serves yet.
func (s *site) refuse() {
	defer close(s.refused)
	for {
		c, err := s.listener.Accept()
		select {
		case <-s.refusing:
			if c != nil {
				_ = c.Close()
			}
			return
		default:
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		_ = c.Close()
	}
}

// stopRefusing ends refuse: the deadline in the past wakes its Accept.
func (s *site) stopRefusing() {
	s.stopOnce.Do(func() {
		close(s.refusing)
		_ = s.listener.SetDeadline(time.Unix(1, 0))
		<-s.refused
		_ = s.listener.SetDeadline(time.Time{})
	})
}

func (s *site) endpoint() clusterv1.APIEndpoint {
	a := s.listener.Addr().(*net.TCPAddr)
	return clusterv1.APIEndpoint{Host: a.IP.String(), Port: int32(a.Port)}
}

// booted returns the fleet's cluster, nil before the machine booted.
func (s *site) booted() *fleet.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cluster
}

// boot starts the site's cluster once, with the Machine's name for its node.
func (s *site) boot(f *fleet.Fleet, namespace, machineName string) (*fleet.Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster != nil || s.bootErr != nil {
		return s.cluster, s.bootErr
	}
	s.stopRefusing()
	c, err := f.Add(fleet.ClusterSpec{
		Namespace: namespace, Name: s.name, Distribution: s.dist, MachineName: machineName,
		CA: s.ca, EtcdCA: s.etcd, APIListener: s.listener, KubernetesVersion: kubernetesVersion,
	})
	if err != nil {
		s.bootErr = fmt.Errorf("site %s did not boot: %w", s.name, err)
		return nil, s.bootErr
	}
	s.cluster = c
	return c, nil
}

// failed returns why the site did not boot, or nil.
func (s *site) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bootErr
}

// startCAPI runs Cluster API's core Cluster and Machine reconcilers (the packages Cluster API
// exports, at the version the test module pins, with its manager's defaults), its ClusterCache,
// and the benchmark's infrastructure provider in this process. MachineSets, MachineDeployments,
// MachineHealthChecks and MachinePools are not used by single-node control-plane clusters and
// are left out. It returns once the manager's caches synced; cancel ctx to stop it.
func startCAPI(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, sites map[string]*site, f *fleet.Fleet) (<-chan error, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  capisetup.ManagerCacheOptions(scheme, capiUserAgent, "", capiSyncPeriod),
		Client:                 capisetup.ManagerClientOptions(),
	})
	if err != nil {
		return nil, err
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return nil, err
	}
	secretCachingClient, err := capisetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, err
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        capisetup.ClusterCacheCacheOptions(),
		Client:       capisetup.ClusterCacheClientOptions(capiUserAgent, 20, 30),
	}, controller.Options{MaxConcurrentReconciles: capiConcurrency})
	if err != nil {
		return nil, err
	}
	opts := controller.Options{MaxConcurrentReconciles: capiConcurrency}
	if err := (&cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConnectionGracePeriod: capiRemoteConnectionGracePeriod,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("Cluster controller: %w", err)
	}
	if err := (&machine.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConditionsGracePeriod: capiRemoteConditionsGracePeriod,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("Machine controller: %w", err)
	}
	if err := (&infraMachineReconciler{client: mgr.GetClient(), sites: sites, fleet: f}).setup(mgr); err != nil {
		return nil, fmt.Errorf("infrastructure controller: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cluster API's caches did not sync")
	}
	return done, nil
}

// infraMachineReconciler is the benchmark's infrastructure provider for KairosSimMachines (the
// test infrastructure's kinds, without its simnode machinery): once a Machine has bootstrap data,
// its site boots, and the KairosSimMachine reports what a real provider would: the provider ID
// the node registered with (fleet.ClusterSpec's, simnode.ProviderID), the node's address and
// host name, provisioned. KairosSimClusters are provisioned by the fixture itself.
type infraMachineReconciler struct {
	client client.Client
	sites  map[string]*site // by Cluster name
	fleet  *fleet.Fleet
}

func (r *infraMachineReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.KairosSimMachine{}).
		Named("bench-kairossimmachine").
		WithOptions(controller.Options{MaxConcurrentReconciles: capiConcurrency}).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("KairosSimMachine")))).
		Complete(r)
}

func (r *infraMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &infrav1.KairosSimMachine{}
	if err := r.client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.client, m.ObjectMeta)
	if err != nil || machine == nil {
		return ctrl.Result{}, err
	}
	if machine.Spec.Bootstrap.DataSecretName == nil || !m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := r.sites[machine.Spec.ClusterName]
	if s == nil {
		return ctrl.Result{}, nil
	}
	c, err := s.boot(r.fleet, m.Namespace, machine.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if m.Spec.ProviderID != c.ProviderID() {
		orig := m.DeepCopy()
		m.Spec.ProviderID = c.ProviderID()
		if err := r.client.Patch(ctx, m, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, err
		}
	}
	addresses := []clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: c.NodeAddress().String()},
		{Type: clusterv1.MachineHostName, Address: c.NodeName()},
	}
	if !ptr.Deref(m.Status.Initialization.Provisioned, false) || len(m.Status.Addresses) != 2 {
		orig := m.DeepCopy()
		m.Status.Addresses = addresses
		m.Status.NodeName = c.NodeName()
		m.Status.Initialization.Provisioned = ptr.To(true)
		if err := r.client.Status().Patch(ctx, m, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}
