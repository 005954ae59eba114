package fleet

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// TestClusterCache connects Cluster API's own ClusterCache to a simulated cluster through the
// kubeconfig Secret, as the managers do: it connects, its health probe passes, its cached
// client lists the Node through a watch and sees the kubelet's changes.
func TestClusterCache(t *testing.T) {
	files, err := framework.CAPICRDFiles()
	require.NoError(t, err)
	var clusterCRD []string
	for _, f := range files {
		if filepath.Base(f) == "cluster.x-k8s.io_clusters.yaml" {
			clusterCRD = append(clusterCRD, f)
		}
	}
	require.Len(t, clusterCRD, 1)
	crds, err := framework.LoadCRDs(clusterCRD...)
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, clusterv1.AddToScheme(scheme))
	env, err := framework.Start(framework.Options{CRDs: crds, Scheme: scheme})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })

	f := newFleet(t, 6, Options{LeaseInterval: time.Hour})
	site, err := f.Add(ClusterSpec{Namespace: "default", Name: "site-1"})
	require.NoError(t, err)
	kubeconfig, err := site.Kubeconfig()
	require.NoError(t, err)

	ctx := t.Context()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlControllerOptions(),
	})
	require.NoError(t, err)
	// The managers' own ClusterCache setup (common/provider/manager).
	cc, err := manager.NewClusterCache(ctx, mgr, "fleet-test", manager.ClusterCacheOptions{QPS: 20, Burst: 30})
	require.NoError(t, err)
	go func() { _ = mgr.Start(ctx) }()

	c := env.Client
	host, port, err := net.SplitHostPort(site.Endpoint())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "site-1"},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: host, Port: int32(p)}}}
	require.NoError(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "site-1-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: "site-1"}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": kubeconfig},
	}))
	require.NoError(t, c.Create(ctx, cluster))
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	require.NoError(t, c.Status().Update(ctx, cluster))

	key := client.ObjectKeyFromObject(cluster)
	var remote client.Client
	require.Eventually(t, func() bool {
		remote, err = cc.GetClient(ctx, key)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the ClusterCache connects")
	node := &corev1.Node{}
	require.NoError(t, remote.Get(ctx, client.ObjectKey{Name: site.NodeName()}, node))
	require.Equal(t, site.ProviderID(), node.Spec.ProviderID)

	// The cached client follows the kubelet through its watch.
	require.NoError(t, site.SetNodeReady(false))
	require.Eventually(t, func() bool {
		n := &corev1.Node{}
		if err := remote.Get(ctx, client.ObjectKey{Name: site.NodeName()}, n); err != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionFalse
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return !cc.GetHealthCheckingState(ctx, key).LastProbeSuccessTime.IsZero()
	}, 20*time.Second, 100*time.Millisecond, "the health probe passes")
	st := site.Stats()
	require.NotZero(t, st.Watches)
	require.NotZero(t, st.Probes, "the health probe is counted")
	require.Zero(t, st.Unauthorized)
	t.Logf("workload requests while connecting and probing: %+v", st)
}

// ctrlControllerOptions lets the ClusterCache's controller be registered again in this process.
func ctrlControllerOptions() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}
