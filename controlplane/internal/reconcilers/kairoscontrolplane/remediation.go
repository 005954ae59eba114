package kairoscontrolplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
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

// reconcileRemediation replaces a Machine a MachineHealthCheck marked unhealthy (condition
// OwnerRemediated false): one at a time, within the retry limits, and never when removing its
// etcd member would lose quorum. The replacement is created by the scale-up that follows.
func (r *Reconciler) reconcileRemediation(ctx context.Context, s *scope) (ctrl.Result, error) {
	unhealthy := s.machines.Filter(collections.IsUnhealthyAndOwnerRemediated, collections.Not(collections.HasDeletionTimestamp))
	if raw, ok := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		// The remediation is over once its Machine is gone and no replacement is needed (for
		// example because the control plane is being scaled down at the same time); otherwise
		// the scale-up that creates the replacement ends it.
		data, err := parseRemediationData(raw)
		if err != nil {
			return ctrl.Result{}, err
		}
		gone := s.machines.Filter(func(m *clusterv1.Machine) bool { return m.Name == data.Machine }).Len() == 0
		if !gone || s.activeMachines().Len() < s.desiredReplicas() {
			s.remediationReason = controlplanev1.RemediatingReason
			s.remediationMessages = append(s.remediationMessages, fmt.Sprintf("waiting for the replacement of the remediated Machine %s", data.Machine))
			return ctrl.Result{}, nil
		}
		delete(s.kcp.Annotations, controlplanev1.RemediationInProgressAnnotation)
	}
	if unhealthy.Len() == 0 {
		return ctrl.Result{}, nil
	}
	m := unhealthy.Oldest()
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))

	retry := int32(0)
	if raw, ok := m.Annotations[controlplanev1.RemediationForAnnotation]; ok {
		prev, err := parseRemediationData(raw)
		if err != nil {
			return ctrl.Result{}, err
		}
		minHealthy := defaultMinHealthyPeriod
		if v := s.kcp.Spec.Remediation.MinHealthyPeriodSeconds; v != nil {
			minHealthy = time.Duration(*v) * time.Second
		}
		if m.CreationTimestamp.Add(minHealthy).After(s.reconcileTime) {
			retry = prev.RetryCount + 1
		}
		if maxRetry := s.kcp.Spec.Remediation.MaxRetry; maxRetry != nil && retry > *maxRetry {
			msg := fmt.Sprintf("Machine %s replaces %s and failed too: %d remediation retries exceed spec.remediation.maxRetry %d; fix the cause and delete the Machine by hand",
				m.Name, prev.Machine, retry, *maxRetry)
			return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationLimitReachedReason, msg)
		}
		if period := time.Duration(ptr.Deref(s.kcp.Spec.Remediation.RetryPeriodSeconds, 0)) * time.Second; period > 0 {
			if next := prev.Timestamp.Add(period); next.After(s.reconcileTime) {
				s.remediationReason = controlplanev1.RemediationDeferredReason
				s.remediationMessages = append(s.remediationMessages, fmt.Sprintf("remediation of Machine %s deferred until %s (spec.remediation.retryPeriodSeconds)", m.Name, next.UTC().Format(time.RFC3339)))
				return ctrl.Result{RequeueAfter: next.Sub(s.reconcileTime)}, nil
			}
		}
	}

	active := s.activeMachines()
	if active.Len() == 1 && s.initialized() {
		return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationBlockedQuorumReason,
			fmt.Sprintf("Machine %s is the only control-plane Machine: replacing it would lose etcd and the cluster; restore the machine or scale the control plane to 3 first", m.Name))
	}
	if active.Len() > 1 {
		members, err := r.etcdMemberships(ctx, s)
		if err != nil {
			s.remediationReason = controlplanev1.RemediationDeferredReason
			s.remediationMessages = append(s.remediationMessages, fmt.Sprintf("cannot read etcd members to check quorum: %v", err))
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		if !quorumAfterRemoval(members, m) {
			return ctrl.Result{}, r.blockRemediation(ctx, s, m, controlplanev1.RemediationBlockedQuorumReason,
				fmt.Sprintf("removing Machine %s would lose etcd quorum (%d of %d members healthy)", m.Name, members.healthy(), len(members)))
		}
	}

	data := remediationData{Machine: m.Name, Timestamp: metav1.NewTime(s.reconcileTime), RetryCount: retry}
	raw, err := json.Marshal(data)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Client.Delete(ctx, m); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting unhealthy Machine %s: %w", m.Name, err)
	}
	if s.kcp.Annotations == nil {
		s.kcp.Annotations = map[string]string{}
	}
	s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation] = string(raw)
	s.kcp.Status.LastRemediation = controlplanev1.LastRemediationStatus{Machine: m.Name, Time: data.Timestamp, RetryCount: retry}
	log.Info("Remediating unhealthy control-plane Machine", "retryCount", retry)
	s.remediationReason = controlplanev1.RemediatingReason
	s.remediationMessages = append(s.remediationMessages, fmt.Sprintf("deleting unhealthy Machine %s", m.Name))
	s.halt("remediating Machine %s", m.Name)
	return ctrl.Result{}, nil
}

// blockRemediation records why a Machine is not remediated, on the control plane and on the
// Machine's OwnerRemediated condition where users look first.
func (r *Reconciler) blockRemediation(ctx context.Context, s *scope, m *clusterv1.Machine, reason, msg string) error {
	s.remediationReason = reason
	s.remediationMessages = append(s.remediationMessages, msg)
	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return err
	}
	conditions.Set(m, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	return helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition}})
}
