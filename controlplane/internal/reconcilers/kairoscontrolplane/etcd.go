package kairoscontrolplane

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// What the distributions keep about etcd members in the workload cluster.
var (
	// k0s (>= v1.30) publishes one EtcdMember per controller, named after its node; spec.leave
	// asks k0s to remove the member (docs.k0sproject.io, remove_controller, "Declarative Etcd
	// member management"; k0s pkg/apis/etcd/v1beta1).
	k0sEtcdMemberGVK = schema.GroupVersionKind{Group: "etcd.k0sproject.io", Version: "v1beta1", Kind: "EtcdMember"}
	// k0s autopilot keeps a ControlNode per controller; k0s' own procedure for removing a
	// controller deletes it (docs.k0sproject.io, remove_controller).
	k0sControlNodeGVK = schema.GroupVersionKind{Group: "autopilot.k0sproject.io", Version: "v1beta2", Kind: "ControlNode"}
)

const (
	// k3sEtcdNodeNameAnnotation is set by k3s on server Nodes: the name of their etcd member.
	k3sEtcdNodeNameAnnotation = "etcd.k3s.cattle.io/node-name"
	// k3sEtcdRemoveAnnotation asks k3s to remove the Node's etcd member.
	k3sEtcdRemoveAnnotation = "etcd.k3s.cattle.io/remove"
	// k3sEtcdRemovedAnnotation is set by k3s once the member is gone.
	k3sEtcdRemovedAnnotation = "etcd.k3s.cattle.io/removed-node-name"

	// leaveGrace is how long the distribution gets to remove a member it was asked to remove
	// before the control plane removes it from etcd itself (the node may be powered off, and with
	// it the k3s controller that would act on the annotation).
	leaveGrace = 2 * time.Minute
)

// reconcilePreTerminateHooks removes the etcd member of a deleting Machine once Cluster API has
// drained it and every other pre-terminate hook is done, then lets the deletion continue. One
// Machine at a time, and only while etcd keeps quorum without the member.
func (r *Reconciler) reconcilePreTerminateHooks(ctx context.Context, s *scope) (ctrl.Result, error) {
	deleting := s.deletingMachines()
	if deleting.Len() == 0 {
		return ctrl.Result{}, nil
	}
	// Before anything else is waited for: a leave handed to the distribution earlier is carried
	// out whenever k0s or k3s gets to it, whatever this reconciliation waits for below (a stray
	// member removed first, an unreadable etcd, another Machine going).
	if err := r.withdrawUnsafeLeaves(ctx, s, deleting); err != nil {
		s.blockLeave("%v", err)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	// A Machine that goes without our hook (its hook was already removed) is waited for first.
	for _, m := range deleting {
		if _, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]; !ok {
			s.wait("waiting for Machine %s to be deleted", m.Name)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
	}
	m := deleting.OldestDeletionTimestamp()
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))
	ctx = ctrl.LoggerInto(ctx, log)
	if others := otherPreTerminateHooks(m); len(others) > 0 {
		// Ours runs last: other hooks may still need the node's etcd and API server.
		s.wait("waiting for the other pre-terminate hooks of Machine %s (%s) before its etcd member leaves", m.Name, strings.Join(others, ", "))
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	c := conditions.Get(m, clusterv1.MachineDeletingCondition)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != clusterv1.MachineDeletingWaitingForPreTerminateHookReason {
		s.wait("waiting for Machine %s to be drained before its etcd member leaves", m.Name)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}

	// The last Machine, or the whole cluster going away: there is no etcd left to protect.
	if s.machines.Len() <= 1 || !s.cluster.DeletionTimestamp.IsZero() {
		return r.releaseHook(ctx, s, m)
	}
	if !s.etcd.known() {
		s.wait("cannot tell whether Machine %s hosts an etcd member: %v", m.Name, s.etcd.unknownReason())
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	member := s.etcd.memberOf(m)
	if len(s.etcd.orphans()) > 0 && s.orphansRemovable() {
		// No Machine that is coming up can host the members that match none: they are strays, or
		// the member of this Machine where it cannot be matched. Either way they may go while
		// etcd keeps quorum without them; until they are gone, quorumWithout keeps every other
		// member (reconcileEtcdMembers, which removes strays otherwise, waits for deletions).
		orphan, err := r.removeOrphanMember(ctx, s)
		if err != nil {
			s.blockLeave("the etcd member of Machine %s does not leave yet: %v", m.Name, err)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		if orphan != nil {
			s.wait("removed etcd member %s, which matched no Machine, before the member of Machine %s leaves", orphan, m.Name)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
	}
	// A Machine that hosts no member and may not host an unmatched one takes nothing from etcd.
	if member != nil || len(s.etcd.orphans()) > 0 {
		if ok, why := s.quorumWithout(m); !ok {
			// Whoever deleted the Machine, its member leaving now would stop etcd (a leave already
			// handed to the distribution was withdrawn above).
			s.blockLeave("the etcd member of Machine %s does not leave: %s", m.Name, why)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
	}
	if member == nil {
		// etcd's member list, read with quorum, has no member for it, and every member is
		// matched to another Machine: it left, or never joined.
		log.Info("The Machine hosts no etcd member")
		return r.releaseHook(ctx, s, m)
	}
	force := c.LastTransitionTime.Add(leaveGrace).Before(s.reconcileTime)
	if err := r.removeMember(ctx, s, member, force); err != nil {
		s.blockLeave("cannot remove the etcd member of Machine %s: %v", m.Name, err)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	log.Info("Waiting for the etcd member to leave", "member", member.String())
	s.wait("waiting for the etcd member %s of Machine %s to leave", member, m.Name)
	return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
}

func (r *Reconciler) releaseHook(ctx context.Context, s *scope, m *clusterv1.Machine) (ctrl.Result, error) {
	if err := r.removeHook(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	s.wait("waiting for Machine %s to be deleted", m.Name)
	return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
}

// otherPreTerminateHooks lists the pre-terminate hooks of a Machine that are not ours.
func otherPreTerminateHooks(m *clusterv1.Machine) []string {
	var out []string
	for k := range m.Annotations {
		if strings.HasPrefix(k, clusterv1.PreTerminateDeleteHookAnnotationPrefix) && k != controlplanev1.EtcdMemberHookAnnotation {
			out = append(out, k)
		}
	}
	return out
}

func (r *Reconciler) removeHook(ctx context.Context, m *clusterv1.Machine) error {
	p := client.MergeFrom(m.DeepCopy())
	delete(m.Annotations, controlplanev1.EtcdMemberHookAnnotation)
	if err := r.Client.Patch(ctx, m, p); err != nil {
		return fmt.Errorf("removing the pre-terminate hook of Machine %s: %w", m.Name, err)
	}
	return nil
}

// removeMember makes an etcd member leave. The distribution's own mechanism is asked first
// where it exists (k0s EtcdMember spec.leave, k3s Node annotation), so that the node stops its
// member cleanly; without it, or when the distribution did not act within leaveGrace (force),
// the member is removed from etcd directly, as k0s' manual procedure does with
// "k0s etcd leave --peer-address" (docs.k0sproject.io, remove_controller). Whether the member is
// gone is only ever read from etcd's member list.
func (r *Reconciler) removeMember(ctx context.Context, s *scope, member *etcdMember, force bool) error {
	if !force && member.Name != "" {
		asked, err := r.askDistributionToRemove(ctx, s, member)
		if err != nil || asked {
			return err
		}
	}
	// The quorum check of this reconciliation used etcd's health as it was when it started;
	// removing a member directly cannot be taken back, so it is checked again just before.
	if ok, why := r.quorumNowWithout(ctx, s, member); !ok {
		if err := r.withdrawLeave(ctx, s, member); err != nil {
			return fmt.Errorf("etcd would lose quorum (%s), and the leave request could not be withdrawn: %w", why, err)
		}
		return fmt.Errorf("not removed: %s", why)
	}
	return r.removeMemberFromEtcd(ctx, s, member)
}

// quorumNowWithout reads etcd's health again and tells whether it keeps quorum without member.
func (r *Reconciler) quorumNowWithout(ctx context.Context, s *scope, member *etcdMember) (bool, string) {
	now := &scope{etcd: r.observeEtcd(ctx, s)} // targetQuorum reads only etcd
	if !now.etcd.known() {
		return false, fmt.Sprintf("cannot read etcd's member list with quorum: %v", now.etcd.err)
	}
	for _, m := range now.etcd.members {
		if m.ID == member.ID {
			return now.targetQuorum(m, false)
		}
	}
	return true, "" // gone already
}

// askDistributionToRemove asks k0s or k3s to remove a member and reports whether it could.
func (r *Reconciler) askDistributionToRemove(ctx context.Context, s *scope, member *etcdMember) (bool, error) {
	return r.setLeaveRequest(ctx, s, member, true)
}

// withdrawUnsafeLeaves takes back the leave requests handed to the distribution for the members
// of deleting Machines (only those of Machines with our hook are ever asked to leave) when etcd
// would not keep quorum without them, or when that cannot be told: etcd's member list cannot be
// read, or the Machine matches no member while some member matches no Machine (it may host it,
// and its leave was asked while it was matched). Nothing is withdrawn when no etcd is left to
// protect (the last Machine, the Cluster going away).
func (r *Reconciler) withdrawUnsafeLeaves(ctx context.Context, s *scope, deleting collections.Machines) error {
	if s.machines.Len() <= 1 || !s.cluster.DeletionTimestamp.IsZero() {
		return nil
	}
	for _, m := range deleting.SortedByCreationTimestamp() {
		if _, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]; !ok {
			continue
		}
		if !s.etcd.known() {
			if err := r.withdrawLeaveOfMachine(ctx, s, m); err != nil {
				return fmt.Errorf("cannot tell whether the etcd member of Machine %s may leave (%v), and its leave request, if any, could not be withdrawn: %w", m.Name, s.etcd.unknownReason(), err)
			}
			continue
		}
		member := s.etcd.memberOf(m)
		if member == nil && len(s.etcd.orphans()) == 0 {
			continue // its member is gone: nothing left to withdraw
		}
		ok, why := s.quorumWithout(m)
		if ok {
			continue
		}
		var err error
		if member != nil {
			err = r.withdrawLeave(ctx, s, member)
		} else {
			err = r.withdrawLeaveOfMachine(ctx, s, m)
		}
		if err != nil {
			return fmt.Errorf("the etcd member of Machine %s must not leave (%s), and its leave request could not be withdrawn: %w", m.Name, why, err)
		}
	}
	return nil
}

// withdrawLeaveOfMachine takes back a leave request for the member of a Machine whose member is
// not known: by the names its node goes by, which name the k0s EtcdMember (k0s names it after
// the node's hostname) and the k3s Node that carries the remove annotation.
func (r *Reconciler) withdrawLeaveOfMachine(ctx context.Context, s *scope, m *clusterv1.Machine) error {
	names := machineNodeNames(m)
	if len(names) == 0 {
		return nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		return fmt.Errorf("reaching the workload cluster: %w", err)
	}
	for _, name := range names {
		if s.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
			n := &corev1.Node{}
			if err := remote.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return fmt.Errorf("reading Node %s: %w", name, err)
			}
			if err := setK3sRemoveAnnotation(ctx, remote, n, &etcdMember{Name: cmp.Or(n.Annotations[k3sEtcdNodeNameAnnotation], n.Name)}, false); err != nil {
				return err
			}
			continue
		}
		if _, err := r.setLeaveRequest(ctx, s, &etcdMember{Name: name}, false); err != nil {
			return err
		}
	}
	return nil
}

// withdrawLeave takes back a leave request handed to the distribution for a member that must
// stay: k0s and k3s act on it whenever they get to it, whatever happened to the other members
// in between.
func (r *Reconciler) withdrawLeave(ctx context.Context, s *scope, member *etcdMember) error {
	if member.Name == "" {
		return nil
	}
	_, err := r.setLeaveRequest(ctx, s, member, false)
	return err
}

// setLeaveRequest sets (leave) or withdraws the distribution's request to remove a member: k0s
// EtcdMember spec.leave, the k3s Node annotation etcd.k3s.cattle.io/remove. It reports whether
// the distribution has an object for the member, and writes only when the request changes.
func (r *Reconciler) setLeaveRequest(ctx context.Context, s *scope, member *etcdMember, leave bool) (bool, error) {
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		return false, fmt.Errorf("reaching the workload cluster: %w", err)
	}
	if s.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
		nodes := &corev1.NodeList{}
		if err := remote.List(ctx, nodes); err != nil {
			return false, fmt.Errorf("listing workload Nodes: %w", err)
		}
		for i := range nodes.Items {
			if n := &nodes.Items[i]; n.Annotations[k3sEtcdNodeNameAnnotation] == member.Name {
				return true, setK3sRemoveAnnotation(ctx, remote, n, member, leave)
			}
		}
		return false, nil
	}
	em := &unstructured.Unstructured{}
	em.SetGroupVersionKind(k0sEtcdMemberGVK)
	if err := remote.Get(ctx, client.ObjectKey{Name: member.Name}, em); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading EtcdMember %s: %w", member.Name, err)
	}
	if current, _, _ := unstructured.NestedBool(em.Object, "spec", "leave"); current == leave {
		return true, nil
	}
	p := client.MergeFrom(em.DeepCopy())
	if err := unstructured.SetNestedField(em.Object, leave, "spec", "leave"); err != nil {
		return true, err
	}
	if err := remote.Patch(ctx, em, p); err != nil {
		return true, fmt.Errorf("setting spec.leave of EtcdMember %s to %v: %w", member.Name, leave, err)
	}
	logLeaveRequest(ctx, member, leave)
	return true, nil
}

// setK3sRemoveAnnotation sets (leave) or drops k3s' request to remove the etcd member of a server
// Node, writing only when it changes.
func setK3sRemoveAnnotation(ctx context.Context, remote client.Client, n *corev1.Node, member *etcdMember, leave bool) error {
	if (n.Annotations[k3sEtcdRemoveAnnotation] == "true") == leave {
		return nil
	}
	p := client.MergeFrom(n.DeepCopy())
	if leave {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k3sEtcdRemoveAnnotation] = "true"
	} else {
		delete(n.Annotations, k3sEtcdRemoveAnnotation)
	}
	if err := remote.Patch(ctx, n, p); err != nil {
		return fmt.Errorf("setting the %s annotation of Node %s to %v: %w", k3sEtcdRemoveAnnotation, n.Name, leave, err)
	}
	logLeaveRequest(ctx, member, leave)
	return nil
}

func logLeaveRequest(ctx context.Context, member *etcdMember, leave bool) {
	if leave {
		ctrl.LoggerFrom(ctx).Info("Asked the distribution to remove the etcd member", "member", member.String())
		return
	}
	ctrl.LoggerFrom(ctx).Info("Withdrew the request to remove an etcd member: etcd might not keep quorum without it", "member", member.String())
}

// removeMemberFromEtcd removes a member through a healthy member other than itself.
func (r *Reconciler) removeMemberFromEtcd(ctx context.Context, s *scope, member *etcdMember) error {
	ca, err := r.etcdCA(ctx, s)
	if err != nil {
		return err
	}
	dialer, err := r.etcdDialers(s.cluster.UID, ca)
	if err != nil {
		return err
	}
	var last error
	for _, other := range s.etcd.members {
		if other.ID == member.ID || !other.healthy() || other.PeerHost == "" {
			continue
		}
		ep, err := dialer.Dial(ctx, other.PeerHost)
		if err != nil {
			last = err
			continue
		}
		err = ep.MemberRemove(ctx, member.ID)
		_ = ep.Close()
		if err == nil {
			ctrl.LoggerFrom(ctx).Info("Removed the etcd member", "member", member.String(), "through", other.String())
			return nil
		}
		last = err
	}
	if last == nil {
		return fmt.Errorf("no healthy etcd member to remove %s through", member)
	}
	return fmt.Errorf("removing etcd member %s: %w", member, last)
}

// reconcileEtcdMembers removes etcd members that no control-plane Machine hosts (left behind
// by a Machine whose hook was removed by hand, or by a node that joined on its own), as
// KubeadmControlPlane's reconcileEtcdMembers does, and deletes the distribution objects of
// members that are gone. Only when the control plane is settled: a Machine that is still
// provisioning may host a member that cannot be matched yet.
func (r *Reconciler) reconcileEtcdMembers(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !s.etcd.known() || s.deletingMachines().Len() > 0 || !s.cluster.DeletionTimestamp.IsZero() || !s.orphansRemovable() {
		return ctrl.Result{}, nil
	}
	orphan, err := r.removeOrphanMember(ctx, s)
	if err != nil {
		s.etcdLeaveMessages = append(s.etcdLeaveMessages, err.Error())
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	if orphan != nil {
		s.wait("removed etcd member %s, which belonged to no Machine", orphan)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	if s.kcp.Spec.Distribution == bootstrapv1.DistributionK0s {
		return ctrl.Result{}, r.deleteStaleK0sObjects(ctx, s)
	}
	return ctrl.Result{}, nil
}

// orphansRemovable tells whether the members that match no Machine can be told apart from the
// members of Machines still coming up: every active Machine has its Node and its member. (A
// Machine that is still provisioning may host a member that cannot be matched yet.)
func (s *scope) orphansRemovable() bool {
	for _, m := range s.activeMachines() {
		if !m.Status.NodeRef.IsDefined() || s.etcd.memberOf(m) == nil {
			return false
		}
	}
	return true
}

// removeOrphanMember removes the first member that matches no Machine and can leave while etcd
// keeps quorum, and returns it (nil when none could go); what keeps the others is recorded for
// EtcdClusterHealthy.
func (r *Reconciler) removeOrphanMember(ctx context.Context, s *scope) (*etcdMember, error) {
	for _, orphan := range s.etcd.orphans() {
		if ok, why := s.targetQuorum(orphan, false); !ok {
			s.etcdLeaveMessages = append(s.etcdLeaveMessages, fmt.Sprintf("etcd member %s belongs to no Machine but is not removed: %s", orphan, why))
			continue
		}
		// As in removeMember: a member removed cannot be taken back, so etcd's health is read
		// again right before (another member may have died since this reconciliation began).
		if ok, why := r.quorumNowWithout(ctx, s, orphan); !ok {
			return nil, fmt.Errorf("etcd member %s belongs to no Machine but is not removed: %s", orphan, why)
		}
		ctrl.LoggerFrom(ctx).Info("Removing an etcd member that belongs to no control-plane Machine", "member", orphan.String(), "peer", orphan.PeerHost)
		if err := r.removeMemberFromEtcd(ctx, s, orphan); err != nil {
			return nil, err
		}
		return orphan, nil
	}
	return nil, nil
}

// deleteStaleK0sObjects deletes the EtcdMember and autopilot ControlNode objects of controllers
// that are no etcd member and no control-plane Machine any more: k0s keeps them after a leave.
func (r *Reconciler) deleteStaleK0sObjects(ctx context.Context, s *scope) error {
	remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
	if err != nil {
		return nil //nolint:nilerr // the workload cluster is unreachable: nothing to clean now
	}
	current := map[string]bool{}
	for _, m := range s.etcd.members {
		current[m.Name] = true
	}
	for _, m := range s.machines {
		for _, n := range machineNodeNames(m) {
			current[n] = true
		}
	}
	for _, gvk := range []schema.GroupVersionKind{k0sEtcdMemberGVK, k0sControlNodeGVK} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := remote.List(ctx, list); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("listing %s objects: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if current[o.GetName()] {
				continue
			}
			if err := remote.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s %s: %w", gvk.Kind, o.GetName(), err)
			}
			ctrl.LoggerFrom(ctx).Info("Deleted the object of a controller that left", "kind", gvk.Kind, "name", o.GetName())
		}
	}
	return nil
}
