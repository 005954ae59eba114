package kairoscontrolplane

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/common/syntax"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// updateStatus derives the whole status from the Machines and what the phases observed: the
// counters, then one setter per condition.
func updateStatus(ctx context.Context, s *scope) {
	setReplicas(s)
	setInitializedCondition(s)
	setCertificatesAvailableCondition(s)
	setBootstrapProviderCompatibleCondition(s)
	setMachinesReadyCondition(ctx, s)
	setMachinesUpToDateCondition(ctx, s)
	setRollingOutCondition(s)
	setScalingUpCondition(s)
	setScalingDownCondition(s)
	setRemediatingCondition(s)
	setDeletingCondition(s)
	setEtcdClusterHealthyCondition(s)
	setEtcdRestoredCondition(s)
	setEtcdSnapshotsStatus(s)
	setEtcdSnapshotsUpToDateCondition(s)
	setAvailableCondition(s)
}

// setReplicas sets the replica counters, the versions and the scale selector.
func setReplicas(s *scope) {
	kcp, machines := s.kcp, s.machines
	kcp.Status.Selector = selector(s).String()
	kcp.Status.Replicas = ptr.To(int32(machines.Len()))
	kcp.Status.ReadyReplicas = ptr.To(count(machines, clusterv1.MachineReadyCondition))
	kcp.Status.AvailableReplicas = ptr.To(count(machines, clusterv1.MachineAvailableCondition))
	upToDate := int32(0)
	for _, m := range machines {
		// A Machine updated in place has its new spec already, but not yet its new node.
		if ok, _ := s.upToDate(m); ok && !updatingInPlace(m) {
			upToDate++
		}
	}
	kcp.Status.UpToDateReplicas = ptr.To(upToDate)
	kcp.Status.Versions, kcp.Status.Version = versions(machines)
}

func setInitializedCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.InitializedCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.InitializedReason}
	if !s.initialized() {
		c = metav1.Condition{Type: controlplanev1.InitializedCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotInitializedReason,
			Message: "waiting for the first control-plane node to serve the API"}
	}
	conditions.Set(s.kcp, c)
}

func setCertificatesAvailableCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.CertificatesAvailableCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.CertificatesAvailableReason}
	if s.certificatesErr != nil {
		// The error may name Secrets and keys; its details go to the log only.
		c = metav1.Condition{Type: controlplanev1.CertificatesAvailableCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.CertificatesInternalErrorReason,
			Message: "cannot create or read the cluster certificates; see the controller logs"}
	}
	conditions.Set(s.kcp, c)
}

// setBootstrapProviderCompatibleCondition reports whether new Machines can get their KairosConfig:
// the installed bootstrap provider is within the version-skew policy and accepted the last
// KairosConfig the control plane created.
func setBootstrapProviderCompatibleCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.BootstrapProviderCompatibleCondition}
	switch {
	case s.bootstrap == nil:
		return // not evaluated (the control plane is being deleted)
	case s.bootstrap.problem != "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.BootstrapProviderNotCompatibleReason, s.bootstrap.problem
	case s.configRefused != "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.KairosConfigRefusedReason, s.configRefused
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, controlplanev1.BootstrapProviderCompatibleReason, s.bootstrap.summary()
	}
	conditions.Set(s.kcp, c)
}

func setMachinesReadyCondition(ctx context.Context, s *scope) {
	setAggregate(ctx, s.kcp, s.machines, clusterv1.MachineReadyCondition, controlplanev1.MachinesReadyCondition,
		controlplanev1.NotReadyReason, controlplanev1.ReadyUnknownReason, controlplanev1.ReadyReason)
}

func setMachinesUpToDateCondition(ctx context.Context, s *scope) {
	setAggregate(ctx, s.kcp, s.machines, clusterv1.MachineUpToDateCondition, controlplanev1.MachinesUpToDateCondition,
		controlplanev1.NotUpToDateReason, controlplanev1.UpToDateUnknownReason, controlplanev1.UpToDateReason)
}

// setRollingOutCondition lists the outdated Machines and why, the Machines being updated in
// place, which path the rollout took (when in-place updates were considered) and what holds the
// rollout back.
func setRollingOutCondition(s *scope) {
	outdated, reasons := s.outdatedMachines()
	updating := s.updatingMachines()
	c := metav1.Condition{Type: controlplanev1.RollingOutCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotRollingOutReason}
	if outdated.Len() > 0 || updating.Len() > 0 {
		var msgs []string
		for _, m := range outdated.SortedByCreationTimestamp() {
			if !updating.Has(m) {
				msgs = append(msgs, fmt.Sprintf("Machine %s: %s", m.Name, strings.Join(reasons[m.Name], ", ")))
			}
		}
		for _, m := range updating.SortedByCreationTimestamp() {
			msgs = append(msgs, fmt.Sprintf("Machine %s: %s", m.Name, s.inPlaceProgress(m)))
		}
		if s.inPlaceMessage != "" {
			msgs = append(msgs, s.inPlaceMessage)
		}
		c = metav1.Condition{Type: controlplanev1.RollingOutCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.RollingOutReason,
			Message: bullets(append(msgs, s.preflightMessages...))}
	}
	conditions.Set(s.kcp, c)
}

// inPlaceProgress says how far the in-place update of a Machine is: what Cluster API's Machine
// controller reports in the Machine's Updating condition, once it took the Machine over.
func (s *scope) inPlaceProgress(m *clusterv1.Machine) string {
	if _, ok := s.inPlaceFailures[m.Name]; ok {
		return s.inPlaceFailureMessage(m)
	}
	if c := conditions.Get(m, clusterv1.MachineUpdatingCondition); c != nil && c.Status == metav1.ConditionTrue && c.Message != "" {
		return "updating in place: " + c.Message
	}
	return "updating in place"
}

func setScalingUpCondition(s *scope) {
	active, desired := s.activeMachines().Len(), s.scalingTarget()
	c := metav1.Condition{Type: controlplanev1.ScalingUpCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingUpReason}
	if active < desired {
		c = metav1.Condition{Type: controlplanev1.ScalingUpCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingUpReason,
			Message: bullets(append([]string{fmt.Sprintf("scaling up from %d to %d replicas", active, desired)}, s.blockers()...))}
	}
	conditions.Set(s.kcp, c)
}

func setScalingDownCondition(s *scope) {
	active, desired := s.activeMachines().Len(), s.scalingTarget()
	c := metav1.Condition{Type: controlplanev1.ScalingDownCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingDownReason}
	if active > desired {
		c = metav1.Condition{Type: controlplanev1.ScalingDownCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingDownReason,
			Message: bullets(append([]string{fmt.Sprintf("scaling down from %d to %d replicas", active, desired)}, s.blockers()...))}
	}
	conditions.Set(s.kcp, c)
}

func setRemediatingCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.RemediatingCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotRemediatingReason}
	if s.remediationReason != "" {
		c = metav1.Condition{Type: controlplanev1.RemediatingCondition, Status: metav1.ConditionTrue, Reason: s.remediationReason,
			Message: bullets(s.remediationMessages)}
	}
	conditions.Set(s.kcp, c)
}

func setDeletingCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.DeletingCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotDeletingReason}
	if !s.kcp.DeletionTimestamp.IsZero() {
		reason := s.deletingReason
		if reason == "" { // deletion failed before it could say what it waits for
			reason = controlplanev1.DeletingReason
		}
		c = metav1.Condition{Type: controlplanev1.DeletingCondition, Status: metav1.ConditionTrue, Reason: reason, Message: s.deletingMessage}
	}
	conditions.Set(s.kcp, c)
}

// setEtcdClusterHealthyCondition summarizes etcd as its members report it: every member hosted
// by a Machine and healthy, every settled Machine hosting a member.
func setEtcdClusterHealthyCondition(s *scope) {
	c := metav1.Condition{Type: controlplanev1.EtcdClusterHealthyCondition}
	switch {
	case s.etcd == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdClusterHealthUnknownReason, "Waiting for the control plane to be initialized"
		if !s.kcp.DeletionTimestamp.IsZero() {
			c.Message = "The control plane is being deleted"
		}
	case !s.etcd.known():
		c.Status, c.Reason = metav1.ConditionUnknown, controlplanev1.EtcdClusterHealthUnknownReason
		c.Message = fmt.Sprintf("No control-plane node answered a quorum read of etcd's member list: %v", s.etcd.err)
	default:
		var problems []string
		for _, m := range s.machines.SortedByCreationTimestamp() {
			if cond := etcdMemberCondition(s, m); cond.Status == metav1.ConditionFalse && cond.Reason != controlplanev1.EtcdMemberDeletingReason {
				problems = append(problems, fmt.Sprintf("Machine %s: %s", m.Name, cond.Message))
			}
		}
		problems = append(problems, s.etcdProblems()...)
		problems = append(problems, s.etcdLeaveMessages...)
		if len(problems) > 0 {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.EtcdClusterNotHealthyReason, bullets(dedupe(problems))
		} else {
			c.Status, c.Reason = metav1.ConditionTrue, controlplanev1.EtcdClusterHealthyReason
		}
	}
	conditions.Set(s.kcp, c)
}

// setAvailableCondition: the control plane is available when its API is served and etcd has
// quorum, whatever the replica count says: a 1 -> 3 scale-up keeps it available, a lost quorum
// does not.
func setAvailableCondition(s *scope) {
	var problems []string
	if !s.initialized() {
		problems = append(problems, "Waiting for the first control-plane node to serve the API")
	} else {
		if !s.apiServed {
			problems = append(problems, "The workload cluster's API server does not answer Cluster API's health probes")
		}
		// etcd has quorum exactly when a quorum read succeeds: the member list was read that way.
		// (Counting members that pass their own checks would be stricter: a member just promoted
		// may be slow to serve reads while etcd as a whole has quorum.)
		switch {
		case s.etcd == nil:
			problems = append(problems, "etcd's health is not known yet")
		case !s.etcd.known() && len(s.etcd.joining) > 0:
			// k0s adds a joining controller as a voting member: etcd has no quorum until the new
			// member runs, for a few seconds.
			problems = append(problems, fmt.Sprintf("etcd has no quorum while the member at %s joins", strings.Join(s.etcd.joining, ", ")))
		case !s.etcd.known():
			problems = append(problems, fmt.Sprintf("etcd has no quorum: no control-plane node answered a quorum read (%v)", s.etcd.err))
		}
	}
	if !s.kcp.DeletionTimestamp.IsZero() {
		problems = append(problems, "The control plane is being deleted")
	}
	c := metav1.Condition{Type: controlplanev1.AvailableCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}
	if len(problems) > 0 {
		c = metav1.Condition{Type: controlplanev1.AvailableCondition, Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason, Message: bullets(problems)}
	}
	conditions.Set(s.kcp, c)
}

// bullets formats messages the way Cluster API aggregates them: one "* " line each.
func bullets(msgs []string) string {
	if len(msgs) == 1 {
		return msgs[0]
	}
	return "* " + strings.Join(msgs, "\n* ")
}

// blockers lists what holds the control plane back, for the scaling conditions.
func (s *scope) blockers() []string {
	var out []string
	for _, msg := range []string{s.waitMessage, s.configTemplateErr, s.infraTemplateErr} {
		if msg != "" && !slices.Contains(out, msg) {
			out = append(out, msg)
		}
	}
	return out
}

// setAggregate summarizes one condition of every Machine into a control-plane condition.
func setAggregate(ctx context.Context, kcp *controlplanev1.KairosControlPlane, machines collections.Machines, source, target, falseReason, unknownReason, trueReason string) {
	if machines.Len() == 0 {
		conditions.Set(kcp, metav1.Condition{Type: target, Status: metav1.ConditionTrue, Reason: controlplanev1.NoReplicasReason})
		return
	}
	c, err := conditions.NewAggregateCondition(machines.UnsortedList(), source,
		conditions.TargetConditionType(target),
		conditions.CustomMergeStrategy{MergeStrategy: conditions.DefaultMergeStrategy(
			conditions.ComputeReasonFunc(conditions.GetDefaultComputeMergeReasonFunc(falseReason, unknownReason, trueReason)),
		)},
	)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Aggregating Machine conditions", "condition", source)
		conditions.Set(kcp, metav1.Condition{Type: target, Status: metav1.ConditionUnknown, Reason: unknownReason, Message: "see the controller logs"})
		return
	}
	conditions.Set(kcp, *c)
}

func count(machines collections.Machines, condition string) int32 {
	n := int32(0)
	for _, m := range machines {
		if conditions.IsTrue(m, condition) {
			n++
		}
	}
	return n
}

// selector selects the control plane's Machines, for the scale subresource.
func selector(s *scope) labels.Selector {
	sel := collections.ControlPlaneSelectorForCluster(s.cluster.Name)
	// Narrowed to this control plane's Machines, as Machines get the control-plane-name label.
	// Its value is a valid label value by construction (controlPlaneNameLabelValue), so the
	// requirement needs no validation that could fail.
	reqs, _ := labels.SelectorFromValidatedSet(labels.Set{controlplanev1.ControlPlaneNameLabel: controlPlaneNameLabelValue(s.kcp)}).Requirements()
	return sel.Add(reqs...)
}

// versions counts the Machines per Kubernetes version, oldest first, and returns the oldest.
func versions(machines collections.Machines) ([]clusterv1.StatusVersion, string) {
	counts := map[string]int32{}
	for _, m := range machines {
		if m.Spec.Version != "" {
			counts[m.Spec.Version]++
		}
	}
	var out []clusterv1.StatusVersion
	for v, n := range counts {
		out = append(out, clusterv1.StatusVersion{Version: v, Replicas: n})
	}
	slices.SortFunc(out, func(a, b clusterv1.StatusVersion) int {
		va, errA := syntax.ParseKubernetesVersion(a.Version)
		vb, errB := syntax.ParseKubernetesVersion(b.Version)
		if errA != nil || errB != nil {
			return strings.Compare(a.Version, b.Version)
		}
		return cmp.Or(syntax.CompareRelease(va, vb), strings.Compare(a.Version, b.Version))
	})
	if len(out) == 0 {
		return nil, ""
	}
	return out, out[0].Version
}
