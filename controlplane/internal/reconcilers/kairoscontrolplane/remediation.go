package kairoscontrolplane

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

const defaultMinHealthyPeriod = time.Hour

// remediationData is recorded on the control plane while a remediation waits for its
// replacement, and then on the replacement, so that repeated failures are counted.
type remediationData struct {
	Machine    string      `json:"machine"`
	Timestamp  metav1.Time `json:"timestamp"`
	RetryCount int32       `json:"retryCount"`
}

func parseRemediationData(s string) (*remediationData, error) {
	d := &remediationData{}
	if err := json.Unmarshal([]byte(s), d); err != nil {
		return nil, fmt.Errorf("parsing remediation data %q: %w", s, err)
	}
	return d, nil
}

// lastMachineAwaitsRemediation: the only Machine of an initialized control plane is to be
// remediated and not deleting yet.
func (s *scope) lastMachineAwaitsRemediation() bool {
	return s.initialized() && s.machines.Len() == 1 && s.machinesToRemediate().Len() == 1
}

// machinesToRemediate are the Machines not deleting yet that a MachineHealthCheck marked
// (OwnerRemediated False) and, on a control plane with etcd snapshots, its only Machine once
// Cluster API says that Machine's infrastructure is gone.
//
// The second is the lost single-node site. Its workload API server ran on the node that is gone,
// so a MachineHealthCheck cannot judge it: Cluster API v1.14's MachineHealthCheck controller
// returns at ClusterCache.GetClient while the workload cluster is unreachable
// (core/reconcilers/machinehealthcheck/machinehealthcheck_controller.go), which for a lost
// single-node site is for good; the check marked the Machine only when its timeout ran out before
// the cache gave the cluster up. InfrastructureReady False with reason InfrastructureDeleted is
// the infrastructure's word, not a guess from silence: Cluster API sets it (and the Machine's
// v1beta1 failure state) when the InfraMachine disappears after provisioning
// (core/reconcilers/machine/machine_controller_status.go and _phases.go), and nothing brings that
// Machine back. A network partition or a node powered off leaves the InfraMachine in place, so a
// site that is only cut off is never restored over a node that still runs. Control planes of
// several Machines keep answering, and keep KubeadmControlPlane's rule: a MachineHealthCheck
// decides (lifecycle TestVanishedVMIsReplaced).
func (s *scope) machinesToRemediate() collections.Machines {
	live := s.machines.Filter(collections.Not(collections.HasDeletionTimestamp))
	if s.initialized() && s.machines.Len() == 1 && s.kcp.Spec.Etcd.Snapshots != nil {
		return live.AnyFilter(collections.IsUnhealthyAndOwnerRemediated, infrastructureDeleted)
	}
	return live.Filter(collections.IsUnhealthyAndOwnerRemediated)
}

// infrastructureDeleted: Cluster API reports the Machine's InfraMachine deleted after it was
// provisioned.
func infrastructureDeleted(m *clusterv1.Machine) bool {
	c := conditions.Get(m, clusterv1.MachineInfrastructureReadyCondition)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == clusterv1.MachineInfrastructureDeletedReason
}

// reconcileRemediation replaces a Machine a MachineHealthCheck marked unhealthy (condition
// OwnerRemediated false), or the lost last Machine of a control plane with etcd snapshots
// (machinesToRemediate), with KubeadmControlPlane's rules: one remediation at a time, nothing
// while another Machine is provisioning or deleting, within the retry limits, and only when
// etcd keeps quorum without the Machine's member. The replacement is created by the scale-up
// that follows, with the relaxed preflight of remediationScaleUpProblems, so that several
// unhealthy Machines are replaced one after the other.
func (r *Reconciler) reconcileRemediation(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.clearStaleOwnerRemediated(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if raw, ok := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		data, err := parseRemediationData(raw)
		if err != nil {
			return ctrl.Result{}, err
		}
		// A Machine created after the remediation started is its replacement: the annotation
		// outlived a crash between the create and the control plane's patch.
		stale := slices.ContainsFunc(s.machines.UnsortedList(), func(m *clusterv1.Machine) bool {
			return m.CreationTimestamp.After(data.Timestamp.Time)
		})
		gone := !slices.ContainsFunc(s.machines.UnsortedList(), func(m *clusterv1.Machine) bool { return m.Name == data.Machine })
		switch {
		case stale, gone && s.activeMachines().Len() >= s.desiredReplicas():
			// The replacement exists, or none is needed (the control plane was scaled down).
			delete(s.kcp.Annotations, controlplanev1.RemediationInProgressAnnotation)
		default:
			s.remediation(controlplanev1.RemediatingReason, "waiting for the replacement of the remediated Machine %s", data.Machine)
			return ctrl.Result{}, nil
		}
	}

	unhealthy := s.machinesToRemediate()
	if unhealthy.Len() == 0 {
		return ctrl.Result{}, nil
	}
	m := s.pickMachineToRemediate(unhealthy)
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))

	data, ok, err := r.checkRetryLimits(ctx, s, m)
	if err != nil || !ok {
		return ctrl.Result{RequeueAfter: s.remediationRequeue}, err
	}

	// The last Machine of a control plane with etcd snapshots is replaced by one that restores
	// the newest snapshot (docs/backups.md): there is no quorum left to keep, and nothing else
	// to wait for. Without snapshots its replacement would start an empty etcd.
	restore := s.initialized() && s.machines.Len() <= 1 && s.kcp.Spec.Etcd.Snapshots != nil
	if restore {
		// A store that was listed and holds no snapshot of the cluster leaves the replacement
		// nothing to restore: it would never start, and the Machine replaced may only have been
		// unwell. A store the management cluster cannot list does not hold it back: the node
		// may reach it, and otherwise waits for it, saying why (EtcdRestored).
		if l := s.snapshots; !l.at.IsZero() && l.err == nil && len(l.newest) == 0 {
			spec := s.kcp.Spec.Etcd.Snapshots
			return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("Machine %s is the only control-plane Machine and s3://%s/%s/ holds no etcd snapshot of the cluster: its replacement would have nothing to restore; it is replaced once a snapshot is there",
					m.Name, spec.S3.Bucket, spec.S3.Folder(s.kcp.Namespace, s.cluster.Name)))
		}
	}
	if s.initialized() && !restore {
		if s.machines.Len() <= 1 {
			return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationBlockedQuorumReason,
				fmt.Sprintf("Machine %s is the only control-plane Machine: replacing it would lose etcd and the cluster; restore the machine or scale the control plane to 3 first", m.Name))
		}
		if provisioning := s.activeMachines().Filter(collections.Not(collections.HasNode()), func(o *clusterv1.Machine) bool { return o.Name != m.Name }); provisioning.Len() > 0 {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("waiting for Machine(s) %s to finish provisioning before remediating Machine %s", machineNames(provisioning), m.Name))
		}
		// One operation at a time: another Machine's in-place update takes its node down for a
		// while. The Machine being updated may itself be remediated: an update that leaves it
		// unhealthy is what remediation is for (as with KubeadmControlPlane).
		if updating := s.updatingMachines().Filter(func(o *clusterv1.Machine) bool { return o.Name != m.Name }); updating.Len() > 0 {
			return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("waiting for the in-place update of Machine(s) %s to complete before remediating Machine %s", machineNames(updating), m.Name))
		}
		if deleting := s.deletingMachines(); deleting.Len() > 0 {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("waiting for Machine(s) %s to be deleted before remediating Machine %s", machineNames(deleting), m.Name))
		}
		if !s.etcd.known() {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("cannot check etcd quorum before remediating Machine %s: %v", m.Name, s.etcd.err))
		}
		if ok, why := s.quorumWithout(m); !ok {
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationBlockedQuorumReason,
				fmt.Sprintf("removing Machine %s would lose etcd quorum: %s", m.Name, why))
		}
	}

	// The replacement is created by the scale-up that follows: remove nothing that could not be
	// replaced.
	if problem, err := r.replacementProblem(ctx, s); err != nil || problem != "" {
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: bootstrapRecheck}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
			fmt.Sprintf("not remediating Machine %s, its replacement could not be created: %s", m.Name, problem))
	}

	raw, err := json.Marshal(data)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.deleteMachine(ctx, s, m); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting unhealthy Machine %s: %w", m.Name, err)
	}
	if err := r.setOwnerRemediated(ctx, m, controlplanev1.RemediatingReason, "Machine is deleting"); err != nil {
		return ctrl.Result{}, err
	}
	annotations.AddAnnotations(s.kcp, map[string]string{controlplanev1.RemediationInProgressAnnotation: string(raw)})
	s.kcp.Status.LastRemediation = controlplanev1.LastRemediationStatus{Machine: m.Name, Time: data.Timestamp, RetryCount: data.RetryCount}
	msg := fmt.Sprintf("deleting unhealthy Machine %s", m.Name)
	if infrastructureDeleted(m) && !collections.IsUnhealthyAndOwnerRemediated(m) {
		msg = fmt.Sprintf("deleting Machine %s, whose %s was deleted", m.Name, m.Spec.InfrastructureRef.Kind)
	}
	if restore {
		msg += ", the only control-plane Machine: its replacement restores the newest etcd snapshot"
	}
	log.Info("Remediating unhealthy control-plane Machine", "retryCount", data.RetryCount, "restoreFromSnapshot", restore)
	s.remediation(controlplanev1.RemediatingReason, "%s", msg)
	s.wait("remediating Machine %s", m.Name)
	return ctrl.Result{}, nil
}

// pickMachineToRemediate picks the most broken Machine first, as KubeadmControlPlane does: one a
// user asked to remediate, then one without a Node, then one whose etcd member is unhealthy,
// then the oldest. Replacing the worst first gives the replacement the best chance to join.
func (s *scope) pickMachineToRemediate(unhealthy collections.Machines) *clusterv1.Machine {
	ms := unhealthy.UnsortedList()
	rank := func(m *clusterv1.Machine) int {
		switch {
		case annotations.HasRemediateMachine(m):
			return 0
		case !m.Status.NodeRef.IsDefined():
			return 1
		case etcdMemberCondition(s, m).Status != metav1.ConditionTrue:
			return 2
		}
		return 3
	}
	slices.SortFunc(ms, func(a, b *clusterv1.Machine) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ms[0]
}

// checkRetryLimits decides whether a Machine may be remediated now and with which retry count.
// A Machine that replaces another and fails within minHealthyPeriod is a retry of the same
// remediation: retries are spaced by retryPeriodSeconds and capped by maxRetry.
func (r *Reconciler) checkRetryLimits(ctx context.Context, s *scope, m *clusterv1.Machine) (remediationData, bool, error) {
	data := remediationData{Machine: m.Name, Timestamp: metav1.NewTime(s.reconcileTime)}
	raw, ok := m.Annotations[controlplanev1.RemediationForAnnotation]
	if !ok {
		return data, true, nil
	}
	prev, err := parseRemediationData(raw)
	if err != nil {
		return data, false, err
	}
	minHealthy := defaultMinHealthyPeriod
	if v := s.kcp.Spec.Remediation.MinHealthyPeriodSeconds; v != nil {
		minHealthy = time.Duration(*v) * time.Second
	}
	if !prev.Timestamp.Add(minHealthy).After(s.reconcileTime) {
		return data, true, nil // healthy long enough: a new remediation sequence
	}
	data.RetryCount = prev.RetryCount
	if period := time.Duration(ptr.Deref(s.kcp.Spec.Remediation.RetryPeriodSeconds, 0)) * time.Second; period > 0 {
		if next := prev.Timestamp.Add(period); next.After(s.reconcileTime) {
			s.remediationRequeue = next.Sub(s.reconcileTime)
			return data, false, r.blockRemediation(ctx, s, m, controlplanev1.RemediationDeferredReason,
				fmt.Sprintf("remediation of Machine %s deferred until %s (spec.remediation.retryPeriodSeconds)", m.Name, next.UTC().Format(time.RFC3339)))
		}
	}
	if maxRetry := s.kcp.Spec.Remediation.MaxRetry; maxRetry != nil && data.RetryCount >= *maxRetry {
		return data, false, r.blockRemediation(ctx, s, m, controlplanev1.RemediationLimitReachedReason,
			fmt.Sprintf("Machine %s replaces %s and failed too: %d remediation retries reached spec.remediation.maxRetry %d; fix the cause and delete the Machine by hand",
				m.Name, prev.Machine, data.RetryCount, *maxRetry))
	}
	data.RetryCount++
	return data, true, nil
}

// clearStaleOwnerRemediated removes the OwnerRemediated condition from Machines whose
// MachineHealthCheck says they are healthy again, so that a remediation that could not happen
// does not linger.
func (r *Reconciler) clearStaleOwnerRemediated(ctx context.Context, s *scope) error {
	for _, m := range s.machines {
		if !m.DeletionTimestamp.IsZero() || !conditions.IsTrue(m, clusterv1.MachineHealthCheckSucceededCondition) || !conditions.IsFalse(m, clusterv1.MachineOwnerRemediatedCondition) {
			continue
		}
		helper, err := patch.NewHelper(m, r.Client)
		if err != nil {
			return err
		}
		conditions.Delete(m, clusterv1.MachineOwnerRemediatedCondition)
		if err := helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition}}); err != nil {
			return fmt.Errorf("clearing the OwnerRemediated condition of Machine %s: %w", m.Name, err)
		}
	}
	return nil
}

// blockRemediation records why a Machine is not remediated, on the control plane and on the
// Machine's OwnerRemediated condition where users look first.
func (r *Reconciler) blockRemediation(ctx context.Context, s *scope, m *clusterv1.Machine, reason, msg string) error {
	s.remediation(reason, "%s", msg)
	return r.setOwnerRemediated(ctx, m, reason, msg)
}

func (r *Reconciler) setOwnerRemediated(ctx context.Context, m *clusterv1.Machine, reason, msg string) error {
	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return err
	}
	conditions.Set(m, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	return helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition}})
}
