// Package bootstrap_test runs the KairosConfig controller and webhooks in a manager against a
// real kube-apiserver (envtest) with Cluster API's CRDs, plus a second API server that plays
// the workload cluster for join tokens.
package bootstrap_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// watchFilter is the --watch-filter of the manager under test: objects without this label
// value are not reconciled, which TestWatchFilter checks.
const watchFilter = "kairos-suite"

// tokenTTL is short so that refreshes are observable in seconds.
const tokenTTL = 6 * time.Second

var (
	// mgmt is the management API server with Cluster API's and the bootstrap provider's CRDs
	// and webhooks, and the manager running the bootstrap provider.
	mgmt *framework.Suite
	// workload is a bare API server that plays the workload cluster.
	workload *framework.Environment
	// workloadKubeconfig is a cluster-admin kubeconfig of the workload API server.
	workloadKubeconfig []byte
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	// The workload cluster only holds Kubernetes' own objects (join token Secrets).
	workload, err = framework.Start(framework.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = workload.Stop() }()
	if workloadKubeconfig, err = workload.AdminKubeconfig(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	return framework.RunSuite(m, &mgmt, framework.SuiteOptions{
		Providers:    []string{"bootstrap"},
		AddToScheme:  []func(*runtime.Scheme) error{setup.AddToScheme},
		Name:         "bootstrap-suite",
		ClusterCache: manager.ClusterCacheOptions{WatchFilter: watchFilter, Concurrency: 4},
		Setup: []framework.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			// Retry workload connections every few seconds instead of every 30s.
			cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }).SetConnectionCreationRetryInterval(2 * time.Second)
			return setup.Setup(ctx, mgr, setup.Options{ClusterCache: cc, WatchFilter: watchFilter, TokenTTL: tokenTTL, KairosConfigConcurrency: 4})
		}},
	})
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	return framework.NewNamespace(t, mgmt.Client, "kc-")
}

// testCluster is one Cluster with the objects Cluster API would create for it.
type testCluster struct {
	t       *testing.T
	ctx     context.Context
	c       client.Client
	cluster *clusterv1.Cluster
}

// newCluster creates a Cluster carrying the suite's watch filter, not yet provisioned.
func newCluster(t *testing.T, ns, name string) *testCluster {
	t.Helper()
	ctx := framework.Context(t)
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
		Spec:       clusterv1.ClusterSpec{Paused: ptr.To(false)},
	}
	if err := mgmt.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	return &testCluster{t: t, ctx: ctx, c: mgmt.Client, cluster: cluster}
}

// update changes the Cluster (spec and status) as Cluster API's controllers would.
func (tc *testCluster) update(mutate func(*clusterv1.Cluster)) {
	tc.t.Helper()
	framework.Eventually(tc.t, 10*time.Second, func() error {
		if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(tc.cluster), tc.cluster); err != nil {
			return err
		}
		before := tc.cluster.DeepCopy()
		mutate(tc.cluster)
		// Each patch overwrites the object with the server's answer: patch status from a copy.
		withStatus := tc.cluster.DeepCopy()
		if err := tc.c.Patch(tc.ctx, tc.cluster, client.MergeFrom(before)); err != nil {
			return err
		}
		return tc.c.Status().Patch(tc.ctx, withStatus, client.MergeFrom(before))
	})
}

// provision makes the Cluster's infrastructure ready with an endpoint.
func (tc *testCluster) provision() {
	tc.update(func(c *clusterv1.Cluster) {
		c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
		c.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	})
}

// initialize marks the control plane initialized.
func (tc *testCluster) initialize() {
	tc.update(func(c *clusterv1.Cluster) { c.Status.Initialization.ControlPlaneInitialized = ptr.To(true) })
}

// connectWorkload stores the workload API server's kubeconfig as <cluster>-kubeconfig, the way
// a control-plane provider does, so that the ClusterCache can reach it.
func (tc *testCluster) connectWorkload() {
	tc.t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: tc.cluster.Name + "-kubeconfig", Namespace: tc.cluster.Namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": workloadKubeconfig},
	}
	if err := tc.c.Create(tc.ctx, s); err != nil {
		tc.t.Fatal(err)
	}
}

// machine is a Machine with its KairosConfig.
type machine struct {
	m      *clusterv1.Machine
	config *bootstrapv1.KairosConfig
}

// addMachine creates a Machine and its KairosConfig, linked the way Cluster API links them.
func (tc *testCluster) addMachine(name string, spec bootstrapv1.KairosConfigSpec, version string) *machine {
	tc.t.Helper()
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.cluster.Namespace, Labels: map[string]string{
			clusterv1.ClusterNameLabel: tc.cluster.Name, clusterv1.WatchLabel: tc.cluster.Labels[clusterv1.WatchLabel],
		}},
		Spec: clusterv1.MachineSpec{
			ClusterName: tc.cluster.Name,
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachine", Name: name},
		},
	}
	if spec.Role == bootstrapv1.RoleControlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	if err := tc.c.Create(tc.ctx, m); err != nil {
		tc.t.Fatal(err)
	}
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: tc.cluster.Namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name, clusterv1.WatchLabel: tc.cluster.Labels[clusterv1.WatchLabel]},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID,
			}},
		},
		Spec: spec,
	}
	if err := tc.c.Create(tc.ctx, config); err != nil {
		tc.t.Fatal(err)
	}
	return &machine{m: m, config: config}
}
