package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/failuredomains"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
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
		s.wait("waiting for Machine %s to initialize the control plane", machineNames(active))
		return ctrl.Result{}, nil
	case s.updatingMachines().Len() > 0:
		// A failed update the changed spec corrects resumes with it.
		if handled, res, err := r.correctFailedInPlaceUpdates(ctx, s); err != nil || handled {
			return res, err
		}
		// One operation at a time: an in-place update takes a node down for a while, like a
		// deletion. Cluster API's Machine controller removes the annotations when it is done,
		// and that Machine change brings the control plane back here.
		s.wait("waiting for the in-place update of Machine(s) %s to complete", machineNames(s.updatingMachines()))
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

// scaleUp adds one Machine in the control-plane failure domain with the fewest up-to-date ones,
// after the preflight checks (relaxed for the replacement of a remediated Machine). Only the very
// first Machine of a control plane needs no checks.
func (r *Reconciler) scaleUp(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.baseConfig == nil {
		// No watch covers the KairosConfigTemplate: look again later.
		s.wait("%s", s.configTemplateErr)
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	if !s.bootstrap.compatible() {
		// No watch covers CRDs: an upgrade of the bootstrap provider is seen within this time.
		s.wait("creating no Machine: %s", s.bootstrap.problem)
		return ctrl.Result{RequeueAfter: bootstrapRecheck}, nil
	}
	if s.machines.Len() > 0 {
		problems := s.preflightProblems(nil)
		if _, ok := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok && len(problems) > 0 {
			problems = s.remediationScaleUpProblems()
		}
		if r.preflightFailed(ctx, s, problems) {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
	}
	active := s.activeMachines()
	outdated, _ := s.outdatedMachines()
	fd := failuredomains.PickFewest(ctx, s.controlPlaneFailureDomains(), active, active.Difference(outdated))

	var extra map[string]string
	if data, ok := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		extra = map[string]string{controlplanev1.RemediationForAnnotation: data}
	}
	if err := r.createMachine(ctx, s, fd, extra); err != nil {
		if errors.Is(err, errConfigRefused) {
			s.wait("creating no Machine: %s", s.configRefused)
			return ctrl.Result{RequeueAfter: bootstrapRecheck}, nil
		}
		return ctrl.Result{}, err
	}
	// The replacement exists: the remediation that asked for it is complete.
	delete(s.kcp.Annotations, controlplanev1.RemediationInProgressAnnotation)
	s.wait("created a control-plane Machine")
	return ctrl.Result{}, nil
}

// scaleDown deletes one Machine, picked as KubeadmControlPlane picks it, and then some: first the
// outdated ones a user marked with the delete-machine annotation, then any marked one, then
// outdated ones whose etcd member or node is unhealthy, then outdated ones, then (for a plain
// scale-down) unhealthy ones, then any; among those, one in the failure domain with the most
// Machines, oldest first. The Machine is left out of its own preflight checks, so a broken one
// can always be the one to go. An outdated Machine a rollout picks is updated in place instead
// when that is possible (tryInPlaceUpdate): this is the one place where the control plane would
// otherwise remove a Machine for a rollout, so an update that fails costs no more than the
// deletion would have.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope, outdated collections.Machines) (ctrl.Result, error) {
	if !s.bootstrap.compatible() {
		// Outside the version-skew policy running Machines are left alone, whether a rollout or
		// a scale-down would remove them (or update them in place).
		s.wait("deleting no Machine: %s", s.bootstrap.problem)
		return ctrl.Result{RequeueAfter: bootstrapRecheck}, nil
	}
	victim := s.pickMachineToDelete(ctx, outdated)
	if victim == nil {
		return ctrl.Result{}, fmt.Errorf("no control-plane Machine to delete")
	}
	if outdated.Has(victim) {
		if handled, res, err := r.tryInPlaceUpdate(ctx, s, victim); err != nil || handled {
			return res, err
		}
	}
	if r.preflightFailed(ctx, s, s.preflightProblems(victim)) {
		return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}
	if outdated.Len() > 0 {
		// A rollout without surge removes a Machine before creating its replacement: only when
		// the replacement can be created.
		if problem, err := r.replacementProblem(ctx, s); err != nil || problem != "" {
			if problem != "" {
				s.wait("not removing Machine %s for a rollout, its replacement could not be created: %s", victim.Name, problem)
			}
			return ctrl.Result{RequeueAfter: bootstrapRecheck}, err
		}
	}
	if err := r.deleteMachine(ctx, s, victim); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Deleting control-plane Machine", "Machine", klog.KObj(victim))
	s.wait("deleting Machine %s", victim.Name)
	return ctrl.Result{}, nil
}

// bootstrapRecheck is how soon the control plane looks again at a bootstrap provider that is
// outside the version-skew policy or refused a KairosConfig: an upgrade of it changes only CRDs
// and Deployments, which the control plane does not watch.
const bootstrapRecheck = 30 * time.Second

// replacementProblem says why a Machine removed now could not be replaced (the bootstrap
// provider is outside the policy, or refuses the KairosConfig, as a dry run of its creation
// shows), or "" when it could.
func (r *Reconciler) replacementProblem(ctx context.Context, s *scope) (string, error) {
	switch {
	case s.baseConfig == nil:
		return s.configTemplateErr, nil
	case !s.bootstrap.compatible():
		return s.bootstrap.problem, nil
	}
	name, err := desiredstate.MachineName(s.kcp.Spec.MachineNaming.Template, s.cluster.Name, s.kcp.Name, rand.String(5))
	if err != nil {
		return "", fmt.Errorf("spec.machineNaming.template %s", err)
	}
	config, err := s.newKairosConfig(name, machineLabels(s), s.kcp.Spec.MachineTemplate.ObjectMeta.Annotations, s.ownerRef())
	if err != nil {
		return "", err
	}
	if err := r.createKairosConfig(ctx, s, config, true); err != nil {
		if errors.Is(err, errConfigRefused) {
			return s.configRefused, nil
		}
		return "", err
	}
	return "", nil
}

func (s *scope) pickMachineToDelete(ctx context.Context, outdated collections.Machines) *clusterv1.Machine {
	active := s.activeMachines()
	sortedOutdated := outdated.SortedByCreationTimestamp()
	var eligible []*clusterv1.Machine
	sortedActive := active.SortedByCreationTimestamp()
	for _, candidates := range [][]*clusterv1.Machine{
		machinesWithDeleteAnnotation(sortedOutdated),
		machinesWithDeleteAnnotation(sortedActive),
		s.unhealthyMachines(sortedOutdated),
		sortedOutdated,
		s.unhealthyMachines(sortedActive),
		sortedActive,
	} {
		if len(candidates) > 0 {
			eligible = candidates
			break
		}
	}
	if len(eligible) == 0 {
		return nil
	}
	pool := collections.FromMachines(eligible...)
	fd := failuredomains.PickMost(ctx, s.controlPlaneFailureDomains(), active, pool)
	if victim := pool.Filter(collections.InFailureDomains(fd)).Oldest(); victim != nil {
		return victim
	}
	return pool.Oldest()
}

// unhealthyMachines are the Machines whose node is not ready or whose etcd member is not
// healthy: replacing them first restores health soonest.
func (s *scope) unhealthyMachines(ms []*clusterv1.Machine) []*clusterv1.Machine {
	var out []*clusterv1.Machine
	for _, m := range ms {
		if etcdMemberCondition(s, m).Status != metav1.ConditionTrue || !machineReady(m) {
			out = append(out, m)
		}
	}
	return out
}

// preflightFailed records failed preflight checks for the ScalingUp, ScalingDown and
// RollingOut conditions and halts; it reports whether there were any.
func (r *Reconciler) preflightFailed(ctx context.Context, s *scope, problems []string) bool {
	if len(problems) == 0 {
		return false
	}
	s.preflightMessages = problems
	s.wait("preflight checks failed: %s", strings.Join(problems, "; "))
	ctrl.LoggerFrom(ctx).Info("Waiting for the control plane to pass preflight checks", "failures", strings.Join(problems, "; "))
	return true
}
