package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// DefaultDeleteTimeout bounds how long deleting a test Cluster may take.
const DefaultDeleteTimeout = 3 * time.Minute

// NewNamespace creates a namespace for one test (removed when the test ends).
func (h *Harness) NewNamespace(t testing.TB) string {
	t.Helper()
	name := framework.NewNamespace(t, h.Client, "lifecycle-")
	t.Cleanup(func() {
		_ = h.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}

// ClusterOptions shape a test Cluster.
type ClusterOptions struct {
	// FailureDomains of the KairosSimCluster (published in its status, copied by Cluster API to
	// the Cluster).
	FailureDomains []infrav1.KairosSimFailureDomain
	// ControlPlaneRef, when set, is the Cluster's spec.controlPlaneRef (a control-plane provider
	// then owns the kubeconfig and initialization). Create the referenced object yourself.
	ControlPlaneRef *clusterv1.ContractVersionedObjectReference
	// Labels and Annotations of the Cluster.
	Labels, Annotations map[string]string
	// Paused creates the Cluster paused.
	Paused bool
	// ClusterNetwork is the Cluster's spec.clusterNetwork.
	ClusterNetwork clusterv1.ClusterNetwork
	// LoadBalancer, when set, puts the endpoint in front of another port on the control-plane
	// nodes (KairosSimCluster spec.loadBalancer).
	LoadBalancer *infrav1.KairosSimLoadBalancer
	// VirtualIP makes the endpoint a virtual IP the control-plane nodes hold (KairosSimCluster
	// spec.virtualIP): no load balancer answers on it.
	VirtualIP bool
}

// TestCluster is a Cluster on KairosSimCluster infrastructure.
type TestCluster struct {
	h       *Harness
	Cluster *clusterv1.Cluster
	Infra   *infrav1.KairosSimCluster

	// workload is the client WorkloadClient built last, and the kubeconfig it was built from:
	// tests poll the workload cluster, and a new client for each look meant a TLS handshake and
	// API discovery each time.
	mu         sync.Mutex
	kubeconfig []byte
	workload   client.Client
}

// CreateCluster creates a KairosSimCluster and a Cluster using it.
func (h *Harness) CreateCluster(ctx context.Context, namespace, name string, o ClusterOptions) (*TestCluster, error) {
	infra := &infrav1.KairosSimCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec:       infrav1.KairosSimClusterSpec{FailureDomains: o.FailureDomains, LoadBalancer: o.LoadBalancer, VirtualIP: o.VirtualIP},
	}
	if err := h.Client.Create(ctx, infra); err != nil {
		return nil, fmt.Errorf("creating KairosSimCluster: %w", err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: o.Labels, Annotations: o.Annotations},
		Spec: clusterv1.ClusterSpec{
			Paused:         ptr.To(o.Paused),
			ClusterNetwork: o.ClusterNetwork,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimCluster", Name: name,
			},
		},
	}
	if o.ControlPlaneRef != nil {
		cluster.Spec.ControlPlaneRef = *o.ControlPlaneRef
	}
	if err := h.Client.Create(ctx, cluster); err != nil {
		return nil, fmt.Errorf("creating Cluster: %w", err)
	}
	return &TestCluster{h: h, Cluster: cluster, Infra: infra}, nil
}

// NewCluster creates a test Cluster and deletes it (waiting until it is gone) when the test
// ends.
func (h *Harness) NewCluster(t testing.TB, namespace, name string, o ClusterOptions) *TestCluster {
	t.Helper()
	tc, err := h.CreateCluster(context.Background(), namespace, name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tc.Delete(context.Background(), DefaultDeleteTimeout); err != nil {
			t.Errorf("deleting Cluster %s: %v", name, err)
		}
	})
	return tc
}

// Key is the Cluster's namespace/name.
func (tc *TestCluster) Key() client.ObjectKey { return client.ObjectKeyFromObject(tc.Cluster) }

// Get refreshes tc.Cluster and tc.Infra.
func (tc *TestCluster) Get(ctx context.Context) error {
	if err := tc.h.Client.Get(ctx, tc.Key(), tc.Cluster); err != nil {
		return err
	}
	return tc.h.Client.Get(ctx, tc.Key(), tc.Infra)
}

// Endpoint returns host:port of the cluster's control-plane endpoint, once allocated.
func (tc *TestCluster) Endpoint(ctx context.Context) (string, error) {
	if err := tc.Get(ctx); err != nil {
		return "", err
	}
	ep := tc.Infra.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return "", errors.New("no control-plane endpoint yet")
	}
	return net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))), nil
}

// SimCluster returns the simulated workload cluster, once its first control-plane node started
// it (nil before).
func (tc *TestCluster) SimCluster(ctx context.Context) *simnode.Cluster {
	ep, err := tc.Endpoint(ctx)
	if err != nil {
		return nil
	}
	return tc.h.Registry.Cluster(ep)
}

// Node returns the simulated node of a KairosSimMachine of the cluster's namespace.
func (tc *TestCluster) Node(simMachineName string) *simnode.Node {
	return tc.h.Registry.NodeFor(tc.Cluster.Namespace, simMachineName)
}

// MachineOptions shape a stand-alone Machine.
type MachineOptions struct {
	// Version is the Machine's spec.version.
	Version string
	// ControlPlane labels the Machine as a control-plane Machine.
	ControlPlane bool
	// Config is the KairosConfig spec.
	Config bootstrapv1.KairosConfigSpec
	// Infra is the KairosSimMachine spec.
	Infra infrav1.KairosSimMachineSpec
	// FailureDomain of the Machine.
	FailureDomain string
}

// CreateMachine creates a KairosConfig, a KairosSimMachine and a Machine using them, all named
// name.
func (tc *TestCluster) CreateMachine(ctx context.Context, name string, o MachineOptions) (*clusterv1.Machine, error) {
	c, ns, cluster := tc.h.Client, tc.Cluster.Namespace, tc.Cluster.Name
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	if o.ControlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       o.Config,
	}
	if err := c.Create(ctx, config); err != nil {
		return nil, fmt.Errorf("creating KairosConfig: %w", err)
	}
	infra := &infrav1.KairosSimMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       o.Infra,
	}
	if err := c.Create(ctx, infra); err != nil {
		return nil, fmt.Errorf("creating KairosSimMachine: %w", err)
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec: clusterv1.MachineSpec{
			ClusterName:   cluster,
			Version:       o.Version,
			FailureDomain: o.FailureDomain,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachine", Name: name,
			},
		},
	}
	if err := c.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating Machine: %w", err)
	}
	return m, nil
}

// MachineDeploymentOptions shape a MachineDeployment.
type MachineDeploymentOptions struct {
	Replicas int32
	// Version is the Machines' spec.version.
	Version string
	// Config is the KairosConfigTemplate's template spec.
	Config bootstrapv1.KairosConfigSpec
	// Infra is the KairosSimMachineTemplate's template spec.
	Infra infrav1.KairosSimMachineSpec
	// FailureDomain of the Machines.
	FailureDomain string
}

// CreateMachineDeployment creates a KairosConfigTemplate, a KairosSimMachineTemplate and a
// MachineDeployment using them, all named name.
func (tc *TestCluster) CreateMachineDeployment(ctx context.Context, name string, o MachineDeploymentOptions) (*clusterv1.MachineDeployment, error) {
	c, ns, cluster := tc.h.Client, tc.Cluster.Namespace, tc.Cluster.Name
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	config := &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: o.Config}},
	}
	if err := c.Create(ctx, config); err != nil {
		return nil, fmt.Errorf("creating KairosConfigTemplate: %w", err)
	}
	infra := &infrav1.KairosSimMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       infrav1.KairosSimMachineTemplateSpec{Template: infrav1.KairosSimMachineTemplateResource{Spec: o.Infra}},
	}
	if err := c.Create(ctx, infra); err != nil {
		return nil, fmt.Errorf("creating KairosSimMachineTemplate: %w", err)
	}
	selector := map[string]string{clusterv1.ClusterNameLabel: cluster, clusterv1.MachineDeploymentNameLabel: name}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster,
			Replicas:    ptr.To(o.Replicas),
			Selector:    metav1.LabelSelector{MatchLabels: selector},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: copyMap(selector)},
				Spec: clusterv1.MachineSpec{
					ClusterName:   cluster,
					Version:       o.Version,
					FailureDomain: o.FailureDomain,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfigTemplate", Name: name,
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: name,
					},
				},
			},
		},
	}
	if err := c.Create(ctx, md); err != nil {
		return nil, fmt.Errorf("creating MachineDeployment: %w", err)
	}
	return md, nil
}

// MachinePoolOptions shape a MachinePool.
type MachinePoolOptions struct {
	Replicas int32
	// Version is the pool's spec.template.spec.version.
	Version string
	// Config is the spec of the pool's KairosConfig: one KairosConfig, hence one bootstrap data
	// Secret, for every node of the pool.
	Config bootstrapv1.KairosConfigSpec
	// Infra is the KairosSimMachinePool spec.
	Infra infrav1.KairosSimMachinePoolSpec
}

// CreateMachinePool creates a KairosConfig, a KairosSimMachinePool and a MachinePool using
// them, all named name. Cluster API's MachinePool controller makes the MachinePool their
// controller.
func (tc *TestCluster) CreateMachinePool(ctx context.Context, name string, o MachinePoolOptions) (*clusterv1.MachinePool, error) {
	c, ns, cluster := tc.h.Client, tc.Cluster.Namespace, tc.Cluster.Name
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       o.Config,
	}
	if err := c.Create(ctx, config); err != nil {
		return nil, fmt.Errorf("creating KairosConfig: %w", err)
	}
	infra := &infrav1.KairosSimMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec:       o.Infra,
	}
	if err := c.Create(ctx, infra); err != nil {
		return nil, fmt.Errorf("creating KairosSimMachinePool: %w", err)
	}
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: copyMap(labels)},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: cluster,
			Replicas:    ptr.To(o.Replicas),
			Template: clusterv1.MachineTemplateSpec{
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster,
					Version:     o.Version,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachinePool", Name: name,
					},
				},
			},
		},
	}
	if err := c.Create(ctx, mp); err != nil {
		return nil, fmt.Errorf("creating MachinePool: %w", err)
	}
	return mp, nil
}

// StartTokenCleaner runs kube-controller-manager's token cleaner against the cluster's
// workload API server (it must run already), until the test ends. A real k0s controller runs
// it (k0s enables it in its kube-controller-manager): it deletes bootstrap token Secrets whose
// expiration has passed, so an expired join token really is gone.
func (tc *TestCluster) StartTokenCleaner(t testing.TB) *framework.Process {
	t.Helper()
	sc := tc.SimCluster(context.Background())
	if sc == nil {
		t.Fatalf("cluster %s has no running workload API server", tc.Cluster.Name)
	}
	kubeconfig, err := framework.Kubeconfig(sc.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := framework.StartControllerManager(t.TempDir(), kubeconfig, "token-cleaner-controller")
	if err != nil {
		t.Fatalf("starting the token cleaner of cluster %s: %v", tc.Cluster.Name, err)
	}
	t.Cleanup(func() { _ = kcm.Stop(10 * time.Second) })
	return kcm
}

// Machines lists the cluster's Machines.
func (tc *TestCluster) Machines(ctx context.Context) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := tc.h.Client.List(ctx, list, client.InNamespace(tc.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: tc.Cluster.Name}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// WorkloadConfig returns the rest.Config of `<cluster>-kubeconfig`, the kubeconfig Cluster API
// users get.
func (tc *TestCluster) WorkloadConfig(ctx context.Context) (*rest.Config, error) {
	cfg, _, err := tc.workloadConfig(ctx)
	return cfg, err
}

func (tc *TestCluster) workloadConfig(ctx context.Context) (*rest.Config, []byte, error) {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: tc.Cluster.Namespace, Name: secret.Name(tc.Cluster.Name, secret.Kubeconfig)}
	if err := tc.h.Client.Get(ctx, key, s); err != nil {
		return nil, nil, err
	}
	data := s.Data[secret.KubeconfigDataName]
	if len(data) == 0 {
		return nil, nil, fmt.Errorf("secret %s has no %s key", key.Name, secret.KubeconfigDataName)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = 15 * time.Second
	return cfg, data, nil
}

// WorkloadClient returns a client of the workload cluster built from `<cluster>-kubeconfig`: the
// same one as long as the kubeconfig does not change.
func (tc *TestCluster) WorkloadClient(ctx context.Context) (client.Client, error) {
	cfg, kubeconfig, err := tc.workloadConfig(ctx)
	if err != nil {
		return nil, err
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.workload != nil && bytes.Equal(tc.kubeconfig, kubeconfig) {
		return tc.workload, nil
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	tc.kubeconfig, tc.workload = kubeconfig, c
	return c, nil
}

// Delete deletes the Cluster and waits until Cluster API has deleted everything it owns, then
// makes sure the workload API server is stopped.
func (tc *TestCluster) Delete(ctx context.Context, timeout time.Duration) error {
	c := tc.h.Client
	ep, epErr := tc.Endpoint(ctx)
	if err := c.Delete(ctx, tc.Cluster); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		err = c.Get(ctx, tc.Key(), &clusterv1.Cluster{})
		if apierrors.IsNotFound(err) {
			err = nil
			break
		}
		if err == nil {
			err = fmt.Errorf("cluster %s still exists after %s", tc.Cluster.Name, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if epErr == nil {
		tc.h.Registry.StopCluster(ep) // no-op when the KairosSimCluster deletion did it
	}
	return err
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Eventually is framework.Eventually; kept here so that scenario code needs one import.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	framework.Eventually(t, timeout, check)
}
