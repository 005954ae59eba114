package kairoscontrolplane

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// reconcileDelete removes the control plane after the workers: worker nodes need the API
// server to drain, so control-plane Machines go only when no other Machine or MachinePool of
// the Cluster is left. The whole etcd cluster goes with them, so members are not removed one
// by one.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	all, err := collections.GetFilteredMachinesForCluster(ctx, r.Client, s.cluster)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the Cluster's Machines: %w", err)
	}
	workers := all.Difference(s.machines)
	pools := &clusterv1.MachinePoolList{}
	if err := r.Client.List(ctx, pools, client.InNamespace(s.cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("listing the Cluster's MachinePools: %w", err)
	}
	if workers.Len() > 0 || len(pools.Items) > 0 {
		s.deletingReason = controlplanev1.DeletingWaitingForWorkersReason
		s.deletingMessage = fmt.Sprintf("waiting for %d worker Machine(s) and %d MachinePool(s) to be deleted first: %s",
			workers.Len(), len(pools.Items), machineNames(workers))
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}

	if s.machines.Len() == 0 {
		r.controller.ClearConsistencyStore(client.ObjectKeyFromObject(s.kcp), s.kcp.UID)
		controllerutil.RemoveFinalizer(s.kcp, Finalizer)
		s.deletingReason = controlplanev1.DeletionCompletedReason
		return ctrl.Result{}, nil
	}
	for _, m := range s.machines {
		if _, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]; ok {
			if err := r.removeHook(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		if m.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting Machine %s: %w", m.Name, err)
			}
		}
	}
	s.deletingReason = controlplanev1.DeletingWaitingForMachinesReason
	s.deletingMessage = fmt.Sprintf("deleting control-plane Machine(s) %s", machineNames(s.machines))
	return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
}
