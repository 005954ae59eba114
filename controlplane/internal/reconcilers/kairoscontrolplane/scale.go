package kairoscontrolplane

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/failuredomains"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// reconcileReplicas brings the Machines to the desired number and spec, one Machine at a time:
// the first Machine initializes the cluster alone, outdated Machines are rolled before any
// scaling, and every step after the first waits for the previous one to settle.
func (r *Reconciler) reconcileReplicas(ctx context.Context, s *scope) (ctrl.Result, error) {
	active := s.activeMachines()
	desired := s.desiredReplicas()
	outdated, reasons := s.outdatedMachines()

	switch {
	case active.Len() == 0:
		return r.scaleUp(ctx, s)
	case !s.initialized():
		s.halt("waiting for Machine %s to initialize the control plane", machineNames(active))
		return ctrl.Result{}, nil
	case outdated.Len() > 0:
		var msgs []string
		for _, m := range outdated.SortedByCreationTimestamp() {
			msgs = append(msgs, fmt.Sprintf("%s (%s)", m.Name, strings.Join(reasons[m.Name], ", ")))
		}
		ctrl.LoggerFrom(ctx).Info("Rolling out control-plane Machines", "outdated", strings.Join(msgs, "; "))
		if maxSurge(s) > 0 && active.Len() < desired+maxSurge(s) || maxSurge(s) == 0 && active.Len() < desired {
			return r.scaleUp(ctx, s)
		}
		return r.scaleDown(ctx, s, outdated)
	case active.Len() < desired:
		return r.scaleUp(ctx, s)
	case active.Len() > desired:
		return r.scaleDown(ctx, s, collections.New())
	}
	// Nothing to do now; a rollout.after in the future is a reason to come back then.
	if after := s.kcp.Spec.Rollout.After.Time; after.After(s.reconcileTime) {
		for _, m := range active {
			if m.CreationTimestamp.Time.Before(after) {
				return ctrl.Result{RequeueAfter: after.Sub(s.reconcileTime)}, nil
			}
		}
	}
	return ctrl.Result{}, nil
}

func maxSurge(s *scope) int {
	if surge := s.kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge; surge != nil {
		return surge.IntValue()
	}
	return controlplanev1.DefaultMaxSurge
}

// scaleUp adds one Machine in the control-plane failure domain with the fewest up-to-date ones.
func (r *Reconciler) scaleUp(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.baseConfig == nil {
		// No watch covers the KairosConfigTemplate: look again later.
		s.halt("%s", s.configTemplateErr)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	active := s.activeMachines()
	if active.Len() > 0 {
		if ok, err := r.preflight(ctx, s, nil); err != nil || !ok {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, err
		}
	}
	outdated, _ := s.outdatedMachines()
	fd := failuredomains.PickFewest(ctx, s.controlPlaneFailureDomains(), active, active.Difference(outdated))

	var extra map[string]string
	if data, ok := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		extra = map[string]string{controlplanev1.RemediationForAnnotation: data}
	}
	if err := r.createMachine(ctx, s, fd, extra); err != nil {
		return ctrl.Result{}, err
	}
	// The replacement exists: the remediation that asked for it is complete.
	delete(s.kcp.Annotations, controlplanev1.RemediationInProgressAnnotation)
	s.halt("created a control-plane Machine")
	return ctrl.Result{}, nil
}

// scaleDown deletes one Machine: an outdated one when there are (candidates), from the failure
// domain with the most Machines, oldest first.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope, candidates collections.Machines) (ctrl.Result, error) {
	active := s.activeMachines()
	if candidates.Len() == 0 {
		candidates = active
	}
	fd := failuredomains.PickMost(ctx, s.controlPlaneFailureDomains(), active, candidates)
	victim := candidates.Filter(collections.InFailureDomains(fd)).Oldest()
	if victim == nil {
		victim = candidates.Oldest()
	}
	if ok, err := r.preflight(ctx, s, victim); err != nil || !ok {
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, err
	}
	if err := r.Client.Delete(ctx, victim); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting Machine %s: %w", victim.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleting control-plane Machine", "Machine", klog.KObj(victim))
	s.halt("deleting Machine %s", victim.Name)
	return ctrl.Result{}, nil
}

// preflight allows a scale step only when the control plane is settled: every Machine ready,
// every node an etcd member, and, when removing, quorum kept without the Machine's member.
// Failures are recorded for the ScalingUp, ScalingDown and RollingOut conditions.
func (r *Reconciler) preflight(ctx context.Context, s *scope, removing *clusterv1.Machine) (bool, error) {
	var msgs []string
	for _, m := range s.activeMachines().SortedByCreationTimestamp() {
		if !conditions.IsTrue(m, clusterv1.MachineReadyCondition) {
			msgs = append(msgs, fmt.Sprintf("Machine %s is not ready", m.Name))
		}
	}
	members, err := r.etcdMemberships(ctx, s)
	if err != nil {
		msgs = append(msgs, fmt.Sprintf("cannot read etcd members: %v", err))
	} else {
		if missing := machinesWithoutMember(s.activeMachines(), members); missing.Len() > 0 {
			msgs = append(msgs, fmt.Sprintf("etcd has no joined member for Machine(s) %s", machineNames(missing)))
		}
		if removing != nil && !quorumAfterRemoval(members, removing) {
			msgs = append(msgs, fmt.Sprintf("removing Machine %s would lose etcd quorum", removing.Name))
		}
	}
	if len(msgs) > 0 {
		slices.Sort(msgs)
		s.preflightMessages = msgs
		s.halt("preflight checks failed: %s", strings.Join(msgs, "; "))
		ctrl.LoggerFrom(ctx).Info("Waiting for the control plane to settle", "reasons", strings.Join(msgs, "; "))
		return false, nil
	}
	return true, nil
}
