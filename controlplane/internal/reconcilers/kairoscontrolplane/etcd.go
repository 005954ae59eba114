package kairoscontrolplane

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// How the distributions expose etcd membership in the workload cluster.
var k0sEtcdMemberGVK = schema.GroupVersionKind{Group: "etcd.k0sproject.io", Version: "v1beta1", Kind: "EtcdMember"}

const (
	// k3sEtcdNodeNameAnnotation is set by k3s on server Nodes that are etcd members.
	k3sEtcdNodeNameAnnotation = "etcd.k3s.cattle.io/node-name"
	// k3sEtcdRemoveAnnotation asks k3s to remove the Node's etcd member.
	k3sEtcdRemoveAnnotation = "etcd.k3s.cattle.io/remove"
	// k3sEtcdRemovedAnnotation is set by k3s once the member is gone.
	k3sEtcdRemovedAnnotation = "etcd.k3s.cattle.io/removed-node-name"
)

// etcdMembers is the etcd membership of a workload cluster, as the distribution reports it,
// keyed by Node name.
type etcdMembers map[string]bool

// healthy counts the joined members.
func (m etcdMembers) healthy() int {
	n := 0
	for _, joined := range m {
		if joined {
			n++
		}
	}
	return n
}

// etcdMemberships reads the workload cluster's etcd members.
func (r *Reconciler) etcdMemberships(ctx context.Context, s *scope) (etcdMembers, error) {
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		return nil, err
	}
	members := etcdMembers{}
	if s.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
		nodes := &corev1.NodeList{}
		if err := remote.List(ctx, nodes); err != nil {
			return nil, fmt.Errorf("listing workload Nodes: %w", err)
		}
		for _, n := range nodes.Items {
			if _, ok := n.Annotations[k3sEtcdNodeNameAnnotation]; ok {
				_, removed := n.Annotations[k3sEtcdRemovedAnnotation]
				members[n.Name] = !removed
			}
		}
		return members, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(k0sEtcdMemberGVK.GroupVersion().WithKind("EtcdMemberList"))
	if err := remote.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing k0s EtcdMembers: %w", err)
	}
	for _, item := range list.Items {
		// k0s keeps the EtcdMember of a member that left (leave true, Joined false): it is
		// no member any more.
		leave, _, _ := unstructured.NestedBool(item.Object, "spec", "leave")
		joined := k0sMemberJoined(&item)
		if leave && !joined {
			continue
		}
		members[item.GetName()] = joined
	}
	return members, nil
}

// k0sMemberJoined reads the Joined condition k0s keeps on an EtcdMember.
func k0sMemberJoined(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Joined" {
			return m["status"] == "True"
		}
	}
	return false
}

// requestLeave asks the distribution to remove a Node's etcd member and reports whether it is
// gone already.
func (r *Reconciler) requestLeave(ctx context.Context, s *scope, nodeName string) (bool, error) {
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		return false, err
	}
	if s.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
		node := &corev1.Node{}
		if err := remote.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		if _, ok := node.Annotations[k3sEtcdRemovedAnnotation]; ok {
			return true, nil
		}
		if _, ok := node.Annotations[k3sEtcdNodeNameAnnotation]; !ok {
			return true, nil // never became a member
		}
		if node.Annotations[k3sEtcdRemoveAnnotation] == "true" {
			return false, nil
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Annotations[k3sEtcdRemoveAnnotation] = "true"
		return false, remote.Patch(ctx, node, patch)
	}

	member := &unstructured.Unstructured{}
	member.SetGroupVersionKind(k0sEtcdMemberGVK)
	if err := remote.Get(ctx, client.ObjectKey{Name: nodeName}, member); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	leave, _, _ := unstructured.NestedBool(member.Object, "spec", "leave")
	if leave {
		return !k0sMemberJoined(member), nil
	}
	patch := client.MergeFrom(member.DeepCopy())
	if err := unstructured.SetNestedField(member.Object, true, "spec", "leave"); err != nil {
		return false, err
	}
	return false, remote.Patch(ctx, member, patch)
}

// reconcilePreTerminateHooks removes the etcd member of a deleting Machine once Cluster API has
// drained it and waits for the hook, then lets the deletion continue. One Machine at a time,
// and only while the remaining members keep quorum.
func (r *Reconciler) reconcilePreTerminateHooks(ctx context.Context, s *scope) (ctrl.Result, error) {
	deleting := s.deletingMachines()
	if deleting.Len() == 0 {
		return ctrl.Result{}, nil
	}
	m := deleting.OldestDeletionTimestamp()
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))
	if _, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]; !ok {
		s.halt("waiting for Machine %s to be deleted", m.Name)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	c := conditions.Get(m, clusterv1.MachineDeletingCondition)
	if c == nil || c.Status != "True" || c.Reason != clusterv1.MachineDeletingWaitingForPreTerminateHookReason {
		s.halt("waiting for Machine %s to be drained before its etcd member leaves", m.Name)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}

	// The last Machine, or one whose node never joined, has no member to remove.
	if s.machines.Len() > 1 && m.Status.NodeRef.IsDefined() && s.cluster.DeletionTimestamp.IsZero() {
		members, err := r.etcdMemberships(ctx, s)
		if err != nil {
			s.halt("cannot reach the workload cluster to remove the etcd member of Machine %s: %v", m.Name, err)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		if _, member := members[m.Status.NodeRef.Name]; member && !quorumAfterRemoval(members, m) {
			// Whoever deleted the Machine, its member leaving now would stop etcd.
			s.halt("the etcd member of Machine %s does not leave: the %d remaining members would lose quorum (%d healthy)", m.Name, len(members)-1, members.healthy())
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		left, err := r.requestLeave(ctx, s, m.Status.NodeRef.Name)
		if err != nil {
			s.halt("cannot reach the workload cluster to remove the etcd member of Machine %s: %v", m.Name, err)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		if !left {
			log.Info("Waiting for the etcd member to leave", "node", m.Status.NodeRef.Name)
			s.halt("waiting for the etcd member of Machine %s to leave", m.Name)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		log.Info("The etcd member left", "node", m.Status.NodeRef.Name)
	}
	if err := r.removeHook(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	s.halt("waiting for Machine %s to be deleted", m.Name)
	return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
}

func (r *Reconciler) removeHook(ctx context.Context, m *clusterv1.Machine) error {
	patch := client.MergeFrom(m.DeepCopy())
	delete(m.Annotations, controlplanev1.EtcdMemberHookAnnotation)
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("removing the pre-terminate hook of Machine %s: %w", m.Name, err)
	}
	return nil
}

// quorumAfterRemoval reports whether the etcd cluster keeps quorum once the member of m (if
// any) is gone: the healthy members that remain must be a majority of the members that remain.
func quorumAfterRemoval(members etcdMembers, m *clusterv1.Machine) bool {
	total, healthy := len(members), members.healthy()
	if m != nil && m.Status.NodeRef.IsDefined() {
		if joined, ok := members[m.Status.NodeRef.Name]; ok {
			total--
			if joined {
				healthy--
			}
		}
	}
	return total > 0 && healthy >= total/2+1
}

// machinesWithoutMember lists Machines with a node but no joined etcd member.
func machinesWithoutMember(machines collections.Machines, members etcdMembers) collections.Machines {
	return machines.Filter(func(m *clusterv1.Machine) bool {
		return m.Status.NodeRef.IsDefined() && !members[m.Status.NodeRef.Name]
	})
}
