package kairoscontrolplane

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/collections"
)

// controlPlaneTaint keeps workloads off control-plane nodes; a single-node control plane goes
// without it (k0s --no-taints, k3s without --node-taint), so that it can run workloads alone.
var controlPlaneTaint = corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}

// reconcileControlPlaneTaints keeps the control-plane taint of existing nodes in step with the
// replica count: a node bootstrapped alone is tainted once the control plane grows beyond one,
// and the last node after a scale-down to one loses the taint. The kubelet applies its
// registration taints only when it registers, so changing them on the Node lasts, and no Machine
// has to be replaced for it (which is why single-node mode is not part of the up-to-date check).
func (r *Reconciler) reconcileControlPlaneTaints(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !s.initialized() || !s.cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	active := s.activeMachines()
	want := s.desiredReplicas() > 1 || active.Len() > 1
	withNode := active.Filter(collections.HasNode())
	if withNode.Len() == 0 {
		return ctrl.Result{}, nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		// Unreachable for now: the health requeue comes back.
		return ctrl.Result{}, nil //nolint:nilerr
	}
	for _, m := range withNode.SortedByCreationTimestamp() {
		node := &corev1.Node{}
		if err := remote.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return ctrl.Result{}, fmt.Errorf("reading Node %s: %w", m.Status.NodeRef.Name, err)
		}
		i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&controlPlaneTaint) })
		if (i >= 0) == want {
			continue
		}
		p := client.MergeFrom(node.DeepCopy())
		if want {
			node.Spec.Taints = append(node.Spec.Taints, controlPlaneTaint)
		} else {
			node.Spec.Taints = slices.Delete(node.Spec.Taints, i, i+1)
		}
		if err := remote.Patch(ctx, node, p); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating the taints of Node %s: %w", node.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Updated the control-plane taint", "Node", klog.KObj(node), "tainted", want)
	}
	return ctrl.Result{}, nil
}
