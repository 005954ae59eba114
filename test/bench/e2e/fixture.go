package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
)

// clusterName is the name of every benchmark Cluster; each provider gets its own namespace.
const clusterName = "bench"

// workerPrefix starts the names of the worker Machines, their configs and data Secrets.
const workerPrefix = "worker-"

// fixture is one provider's management objects: an initialized Cluster in its own namespace
// and N worker Machines with their bootstrap configs.
type fixture struct {
	namespace string
	kind      configKind
	n         int
}

// configKind is the bootstrap config type a provider reconciles.
type configKind struct {
	// Kind, Resource and Group name the type.
	Kind, Resource, Group, Version string
	// MachineVersion is the Kubernetes version of the Machines (what each distribution's
	// nodes report).
	MachineVersion string
	// newConfig returns worker config i, owned by its Machine.
	newConfig func(namespace, name string, owner metav1.OwnerReference) client.Object
}

var kairosConfigKind = configKind{
	Kind: "KairosConfig", Resource: "kairosconfigs", Group: bootstrapv1.GroupVersion.Group, Version: bootstrapv1.GroupVersion.Version,
	MachineVersion: "v1.31.2+k0s",
	newConfig: func(namespace, name string, owner metav1.OwnerReference) client.Object {
		return &bootstrapv1.KairosConfig{
			ObjectMeta: configMeta(namespace, name, owner),
			// A k0s worker: its join token lives in the workload cluster, the case that costs
			// workload writes (k3s workers share one token Secret in the management cluster).
			Spec: bootstrapv1.KairosConfigSpec{
				Role:         bootstrapv1.RoleWorker,
				Distribution: bootstrapv1.DistributionK0s,
				SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyNotARealOneXXXXXXXXXXXXXXXXXX bench",
			},
		}
	},
}

var kubeadmConfigKind = configKind{
	Kind: "KubeadmConfig", Resource: "kubeadmconfigs", Group: kubeadmv1.GroupVersion.Group, Version: kubeadmv1.GroupVersion.Version,
	MachineVersion: "v1.31.2",
	newConfig: func(namespace, name string, owner metav1.OwnerReference) client.Object {
		// An empty spec is a worker joining with a bootstrap token CABPK generates.
		return &kubeadmv1.KubeadmConfig{ObjectMeta: configMeta(namespace, name, owner)}
	},
}

func configMeta(namespace, name string, owner metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace:       namespace,
		Name:            name,
		Labels:          map[string]string{clusterv1.ClusterNameLabel: clusterName},
		OwnerReferences: []metav1.OwnerReference{owner},
	}
}

// create makes the namespace, an initialized Cluster whose workload API is reached through
// workloadKubeconfig at endpoint, its CA, and the N Machines with their configs. The Cluster
// is initialized the way both providers read it: infrastructure provisioned, the
// ControlPlaneInitialized condition (what CABPK reads) and
// status.initialization.controlPlaneInitialized (what a control-plane provider sets and the
// Kairos provider reads), a control-plane endpoint, the <cluster>-ca Secret with certificate
// and key, and the <cluster>-kubeconfig Secret the ClusterCache of both managers uses to
// reach the workload API, where join tokens are created.
func (f *fixture) create(ctx context.Context, c client.Client, host string, port int32, workloadKubeconfig []byte) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.namespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", f.namespace, err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: clusterName},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: host, Port: port}},
	}
	if err := c.Create(ctx, cluster); err != nil {
		return fmt.Errorf("creating Cluster %s/%s: %w", f.namespace, clusterName, err)
	}
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	conditions.Set(cluster, metav1.Condition{
		Type:   clusterv1.ClusterControlPlaneInitializedCondition,
		Status: metav1.ConditionTrue,
		Reason: clusterv1.ClusterControlPlaneInitializedReason,
	})
	if err := c.Status().Update(ctx, cluster); err != nil {
		return fmt.Errorf("marking Cluster %s/%s initialized: %w", f.namespace, clusterName, err)
	}

	ca, err := pki.NewCA("kubernetes-ca", 24*time.Hour)
	if err != nil {
		return fmt.Errorf("generating the cluster CA: %w", err)
	}
	for _, s := range []*corev1.Secret{
		clusterSecret(f.namespace, secret.Name(clusterName, secret.ClusterCA),
			map[string][]byte{secret.TLSCrtDataName: ca.Cert, secret.TLSKeyDataName: ca.Key}),
		clusterSecret(f.namespace, secret.Name(clusterName, secret.Kubeconfig),
			map[string][]byte{secret.KubeconfigDataName: workloadKubeconfig}),
	} {
		if err := c.Create(ctx, s); err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}

	return parallel(ctx, f.n, 8, func(i int) error {
		name := fmt.Sprintf("%s%04d", workerPrefix, i)
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Spec: clusterv1.MachineSpec{
				ClusterName: clusterName,
				Version:     f.kind.MachineVersion,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: f.kind.Group, Kind: f.kind.Kind, Name: name,
				}},
				// No infrastructure provider runs: nothing reads the reference.
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "BenchMachine", Name: name,
				},
			},
		}
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating Machine %s: %w", name, err)
		}
		// Cluster API's Machine controller would set this owner reference; no core controller
		// runs here, so the fixture does.
		owner := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}
		if err := c.Create(ctx, f.kind.newConfig(f.namespace, name, owner)); err != nil {
			return fmt.Errorf("creating %s %s: %w", f.kind.Kind, name, err)
		}
		return nil
	})
}

func clusterSecret(namespace, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Type:       clusterv1.ClusterSecretType,
		Data:       data,
	}
}

// createUnrelatedSecrets creates n Secrets of about 1 KiB that belong to no cluster (no
// cluster-name label), as an application or another operator would: a manager that cached
// every Secret would grow by several MiB, one whose cache selects by label would not.
func createUnrelatedSecrets(ctx context.Context, c client.Client, namespace string, n int) error {
	return parallel(ctx, n, 16, func(i int) error {
		data := make([]byte, 1024)
		_, _ = rand.Read(data)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("unrelated-%05d", i), Labels: map[string]string{"app": "unrelated"}},
			Data:       map[string][]byte{"payload": data},
		}
		if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating unrelated Secret %d: %w", i, err)
		}
		return nil
	})
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
