package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/validation"
)

// snapshotRequestWindow is how long after a request was handed over the store is listed every
// snapshotRetryInterval instead of every snapshotListInterval, until every node's newest
// snapshot was taken since: nodes read the request within a minute, and the status should show
// the result without a five-minute wait. (It shows the newest snapshot of any kind: a scheduled
// one taken in the same minute or after may stand for the on-demand one.)
const snapshotRequestWindow = 5 * time.Minute

// reconcileEtcdSnapshotRequest hands the value of the etcd-snapshot-request annotation to the
// workload cluster (render.EtcdSnapshotRequestConfigMap in kube-system), where each control-plane
// node reads it every minute and takes one on-demand snapshot per value it has not handled:
// nodes never call the management cluster. Only a value not handed yet is written, with one
// server-side apply through an uncached client, so that no ConfigMap informer is started on the
// workload cluster for one object; status.etcd.snapshotRequest echoes it.
func (r *Reconciler) reconcileEtcdSnapshotRequest(ctx context.Context, s *scope) (ctrl.Result, error) {
	value, ok := s.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation]
	if !ok || !s.initialized() || value == s.kcp.Status.Etcd.SnapshotRequest.Value {
		return ctrl.Result{}, nil
	}
	// The webhook refuses these; a control plane created without it still gets no write.
	if errs := validation.ValidateEtcdSnapshotRequest(s.kcp.Annotations, &s.kcp.Spec); len(errs) > 0 {
		ctrl.LoggerFrom(ctx).Info("Ignoring the etcd snapshot request", "reason", errs.ToAggregate().Error())
		return ctrl.Result{}, nil
	}
	// A request that cannot be handed over now is tried again soon, and holds back none of the
	// phases that follow (the phases stop at an error): scaling and remediation go on.
	retry := func(err error) (ctrl.Result, error) {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			ctrl.LoggerFrom(ctx).Error(err, "Handing the etcd snapshot request to the workload cluster failed", "request", value)
		}
		return ctrl.Result{RequeueAfter: snapshotRetryInterval}, nil
	}
	remote, err := r.ClusterCache.GetUncachedClient(ctx, s.clusterKey())
	if err != nil {
		return retry(err)
	}
	cm := corev1ac.ConfigMap(render.EtcdSnapshotRequestConfigMap, metav1.NamespaceSystem).
		WithData(map[string]string{
			render.EtcdSnapshotRequestConfigMapKey: value,
			// Nodes that bootstrapped after it do not take it (render's request script).
			render.EtcdSnapshotRequestedAtKey: strconv.FormatInt(s.reconcileTime.Unix(), 10),
		})
	if err := remote.Apply(ctx, cm, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return retry(fmt.Errorf("writing ConfigMap %s/%s of the workload cluster: %w", metav1.NamespaceSystem, render.EtcdSnapshotRequestConfigMap, err))
	}
	s.kcp.Status.Etcd.SnapshotRequest = controlplanev1.EtcdSnapshotRequestStatus{Value: value, Time: metav1.NewTime(s.reconcileTime)}
	ctrl.LoggerFrom(ctx).Info("Handed an on-demand etcd snapshot request to the workload cluster", "request", value)
	return ctrl.Result{}, nil
}

// snapshotRequestRecent: a request was handed over within snapshotRequestWindow.
func (s *scope) snapshotRequestRecent() bool {
	req := s.kcp.Status.Etcd.SnapshotRequest
	return req.Value != "" && s.reconcileTime.Sub(req.Time.Time) < snapshotRequestWindow
}

// snapshotRequestShown: the listing l shows, for every control-plane node, a snapshot taken
// since the last request was handed over (the on-demand one, or a scheduled one after it).
func (s *scope) snapshotRequestShown(l snapshotListing) bool {
	since := s.kcp.Status.Etcd.SnapshotRequest.Time.Truncate(time.Second)
	for _, m := range s.machines {
		if !m.Status.NodeRef.IsDefined() || !m.DeletionTimestamp.IsZero() {
			continue
		}
		snap, ok := l.newest[m.Status.NodeRef.Name]
		if !ok || snap.Time.Before(since) {
			return false
		}
	}
	return true
}
