package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// etcdRestore is what the scope knows of a restore from an etcd snapshot (docs/backups.md).
type etcdRestore struct {
	// machine restores the cluster (its KairosConfig has etcdSnapshots.restore); "" for none.
	machine string
	// reported: the EtcdRestored condition already says what it restored.
	reported bool
	// snapshot, restored and node are what its node reported, once it did.
	snapshot, restored, node string
}

// restoringMachine is the active Machine whose KairosConfig restores a snapshot, if any.
func (s *scope) restoringMachine() *clusterv1.Machine {
	for _, m := range s.activeMachines().SortedByCreationTimestamp() {
		if c, ok := s.configs[m.Name]; ok && c.Spec.EtcdSnapshots != nil && c.Spec.EtcdSnapshots.Restore != "" {
			return m
		}
	}
	return nil
}

// reconcileEtcdRestore reads what the node of the Machine that restored the cluster reported
// (render.EtcdRestoreConfigMap in its kube-system: nodes never call the management cluster),
// for the EtcdRestored condition. It reads only while such a Machine exists, its node is up and
// the condition does not name it yet: a control plane that never restored reads nothing, and a
// restore is read once. The read bypasses the cache, so that no ConfigMap informer is started on
// the workload cluster for one object.
func (r *Reconciler) reconcileEtcdRestore(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.restoringMachine()
	if m == nil {
		return ctrl.Result{}, nil
	}
	s.restore.machine = m.Name
	if c := conditions.Get(s.kcp, controlplanev1.EtcdRestoredCondition); c != nil && c.Status == metav1.ConditionTrue &&
		strings.HasPrefix(c.Message, restoredPrefix(m.Name)) {
		s.restore.reported = true
		return ctrl.Result{}, nil
	}
	if !m.Status.NodeRef.IsDefined() {
		return ctrl.Result{}, nil
	}
	remote, err := r.ClusterCache.GetUncachedClient(ctx, s.clusterKey())
	if err != nil {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			ctrl.LoggerFrom(ctx).Error(err, "Reaching the workload cluster to read what was restored", "Machine", klog.KObj(m))
		}
		return ctrl.Result{}, nil
	}
	cm := &corev1.ConfigMap{}
	err = remote.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: render.EtcdRestoreConfigMap}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading ConfigMap %s/%s of the restored cluster: %w", metav1.NamespaceSystem, render.EtcdRestoreConfigMap, err)
	}
	// A report of an earlier restore, kept in a later snapshot, names another node.
	if node := cm.Data["node"]; node == m.Status.NodeRef.Name {
		s.restore.snapshot, s.restore.restored, s.restore.node = cm.Data["snapshot"], cm.Data["restored"], node
	}
	return ctrl.Result{}, nil
}

// restoringSince is when the Machine that restores was created, while its restore is not
// reported yet; zero otherwise.
func (s *scope) restoringSince() time.Time {
	if s.restore.machine == "" || s.restore.reported {
		return time.Time{}
	}
	if m, ok := s.machines[s.restore.machine]; ok {
		return m.CreationTimestamp.Time
	}
	return time.Time{}
}

func restoredPrefix(machine string) string {
	return fmt.Sprintf("Machine %s restored etcd snapshot ", machine)
}

// setEtcdRestoredCondition says what the last restore restored. Without a restoring Machine it
// leaves the condition as it is: the record of the last restore, or absent.
func setEtcdRestoredCondition(s *scope) {
	r := s.restore
	switch {
	case r.machine == "" || r.reported:
		return
	case r.snapshot == "":
		// The node cannot report anything before Kubernetes starts; what the management cluster
		// sees of the store (its listing, renewed while the Machine restores) is most likely why
		// the node waits.
		msg := fmt.Sprintf("Machine %s restores the newest etcd snapshot of the cluster before its node starts Kubernetes; if it stays here, the node's journal (the distribution's unit) says why", r.machine)
		l, spec := s.snapshots, s.kcp.Spec.Etcd.Snapshots
		switch {
		case l.at.IsZero() || spec == nil:
		case l.err != nil:
			msg = fmt.Sprintf("Machine %s restores the newest etcd snapshot of the cluster before its node starts Kubernetes; the store cannot be listed from the management cluster (%v): a node that cannot reach it either waits for it and restores once it answers (the node's journal, the distribution's unit, says why)", r.machine, l.err)
		case len(l.newest) == 0:
			msg = fmt.Sprintf("Machine %s restores the newest etcd snapshot of the cluster before its node starts Kubernetes, but s3://%s/%s/ holds no snapshot of the cluster: its node does not start until one is there",
				r.machine, spec.S3.Bucket, spec.S3.Folder(s.kcp.Namespace, s.cluster.Name))
		}
		conditions.Set(s.kcp, metav1.Condition{Type: controlplanev1.EtcdRestoredCondition, Status: metav1.ConditionFalse,
			Reason: controlplanev1.EtcdRestoringReason, Message: msg})
	default:
		taken := "at an unknown time"
		if t, ok := etcdsnapshots.TimeOf(r.snapshot); ok {
			taken = "taken " + t.Format(time.RFC3339)
		}
		conditions.Set(s.kcp, metav1.Condition{Type: controlplanev1.EtcdRestoredCondition, Status: metav1.ConditionTrue,
			Reason:  controlplanev1.EtcdRestoredReason,
			Message: fmt.Sprintf("%s%s (%s) on node %s at %s", restoredPrefix(r.machine), r.snapshot, taken, r.node, r.restored)})
	}
}
