// Package initlock makes sure exactly one control-plane Machine of a Cluster creates the
// cluster: the others must join it, and a second "init" would start a second, separate
// etcd. The lock is a ConfigMap owned by the Cluster, so it is moved and deleted with it.
package initlock

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const holderKey = "machine"

// Lock is the init lock of the Clusters in one management cluster. Reader must be uncached:
// a stale read could hand the lock to two Machines.
type Lock struct {
	Client client.Client
	Reader client.Reader

	// released remembers the Clusters (by UID) whose lock is known to be gone: a Cluster's
	// control plane is initialized once, so its lock never comes back, and every node
	// bootstrapped afterwards would otherwise cost a read answered 404. releasing holds a mutex
	// per Cluster, so that the configs reconciled at once after a start share one read.
	released, releasing sync.Map
}

// Name is the name of a Cluster's lock ConfigMap.
func Name(cluster *clusterv1.Cluster) string { return cluster.Name + "-kairos-init-lock" }

// Acquire takes the lock for machine. It returns false while another existing Machine holds it.
func (l *Lock) Acquire(ctx context.Context, cluster *clusterv1.Cluster, machine string) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: Name(cluster)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return l.create(ctx, cluster, machine)
	case err != nil:
		return false, fmt.Errorf("reading init lock: %w", err)
	}

	holder := cm.Data[holderKey]
	if holder == machine {
		return true, nil
	}
	// A holder that no longer exists (deleted before it initialized the cluster) must not
	// block the cluster forever.
	err = l.Reader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: holder}, &clusterv1.Machine{})
	if apierrors.IsNotFound(err) {
		log.Info("Releasing init lock held by a Machine that no longer exists", "Machine", klog.KRef(cluster.Namespace, holder))
		if err := l.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("releasing stale init lock: %w", err)
		}
		return l.create(ctx, cluster, machine)
	}
	if err != nil {
		return false, fmt.Errorf("reading init lock holder: %w", err)
	}
	return false, nil
}

// Holder returns the Machine holding the lock, or "".
func (l *Lock) Holder(ctx context.Context, cluster *clusterv1.Cluster) (string, error) {
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: Name(cluster)}, cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading init lock: %w", err)
	}
	return cm.Data[holderKey], nil
}

// Release removes the lock once the cluster is initialized. Every node bootstrapped after the
// control plane came up releases it: only the first call per Cluster and process reads (and,
// when the lock is still there, deletes) it.
func (l *Lock) Release(ctx context.Context, cluster *clusterv1.Cluster) error {
	if _, done := l.released.Load(cluster.UID); done {
		return nil
	}
	mu, _ := l.releasing.LoadOrStore(cluster.UID, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if _, done := l.released.Load(cluster.UID); done {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: Name(cluster)}}
	err := l.Reader.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading init lock: %w", err)
	default:
		if err := l.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("releasing init lock: %w", err)
		}
	}
	l.released.Store(cluster.UID, struct{}{})
	return nil
}

func (l *Lock) create(ctx context.Context, cluster *clusterv1.Cluster, machine string) (bool, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      Name(cluster),
			Labels:    map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(),
				Kind:       "Cluster",
				Name:       cluster.Name,
				UID:        cluster.UID,
			}},
		},
		Data: map[string]string{holderKey: machine},
	}
	if err := l.Client.Create(ctx, cm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating init lock: %w", err)
	}
	return true, nil
}
