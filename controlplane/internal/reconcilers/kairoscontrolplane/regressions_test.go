package kairoscontrolplane

// Tests that fail against the current product code; each names the bug it shows. They use
// the helpers of helpers_test.go (and getKubeconfig from cluster_test.go, getKCP/firstReconcile
// from reconciler_test.go) in controlplane/internal/reconcilers/kairoscontrolplane.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// BUG 1: after creating or rotating the kubeconfig, reconcileKubeconfig returns an empty
// Result, so nothing schedules the next rotation. The manager sets no SyncPeriod (10 h
// default), so with clientCertificateValiditySeconds below ~15 h and no other event the
// certificate can expire before the next reconcile.
func TestRegressionKubeconfigNoRequeueAfterCreateOrRotate(t *testing.T) {
	ctx := testContext(t)
	const validity = time.Hour
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.kcp.Spec.Kubeconfig.ClientCertificateValiditySeconds = ptr.To(int32(validity / time.Second))
	e := f.build()

	res, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > validity {
		t.Errorf("after creating the kubeconfig: RequeueAfter = %s, want about %s (the next rotation)", res.RequeueAfter, validity/2)
	}

	s := e.scope(ctx)
	s.reconcileTime = time.Now().Add(validity) // rotation due
	res, err = e.r.reconcileKubeconfig(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > validity {
		t.Errorf("after rotating the kubeconfig: RequeueAfter = %s, want about %s (the next rotation)", res.RequeueAfter, validity/2)
	}
}

// BUG 2: a rollout.after in the future schedules no reconcile at that time: the rollout starts
// only with an unrelated event, at worst the kubeconfig rotation requeue (16 h by default).
func TestRegressionRolloutAfterInTheFutureIsNotRequeued(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	f.kcp.Spec.Rollout.After = metav1.NewTime(time.Now().Add(time.Minute))
	e := f.build()
	if _, err := e.r.reconcileNormal(ctx, e.scope(ctx)); err != nil { // creates the kubeconfig
		t.Fatal(err)
	}
	res, err := e.r.reconcileNormal(ctx, e.scope(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("RequeueAfter = %s, want at most 1m (when rollout.after passes)", res.RequeueAfter)
	}
}

// BUG 3: the remediation-in-progress annotation is cleared only by a scale-up. When the
// remediation is not followed by one (the control plane was above its replica count, e.g.
// scaling 5 -> 3), it stays forever: Remediating stays True and no later unhealthy Machine is
// ever remediated.
func TestRegressionRemediationInProgressNeverClearedWithoutScaleUp(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t) // 3 replicas
	f.machine("m1", 5*time.Hour)
	f.machine("m2", 4*time.Hour, unhealthy())
	f.machine("m3", 3*time.Hour)
	f.machine("m4", 2*time.Hour)
	f.machine("m5", time.Hour)
	e := f.build()

	// pass runs the phases that matter, then lets deleting Machines go.
	pass := func() *scope {
		s := e.scope(ctx)
		for _, p := range []phase{e.r.reconcileRemediation, e.r.reconcileReplicas} {
			if _, err := p(ctx, s); err != nil {
				t.Fatal(err)
			}
			if s.halted {
				break
			}
		}
		for _, m := range e.listMachines() {
			if !m.DeletionTimestamp.IsZero() {
				m.Finalizers = nil
				if err := e.c.Update(ctx, &m); err != nil {
					t.Fatal(err)
				}
				// The pre-terminate hook (not run here) removed its etcd member.
				f.etcd.removeByName(f.memberName(m.Name))
			}
		}
		return s
	}
	pass() // remediates m2
	pass() // 4 > 3: scales down m1
	pass() // 3 of 3: settled
	if n := len(e.listMachines()); n != 3 {
		t.Fatalf("%d Machines, want 3", n)
	}

	// Later, another Machine fails its health check.
	m := e.getMachine("m5")
	unhealthy()(m)
	if err := e.c.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	s := pass()
	if e.getMachine("m5") != nil {
		updateStatus(ctx, s)
		t.Errorf("m5 not remediated; in-progress annotation %q; Remediating: %+v",
			f.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation], conditions.Get(f.kcp, controlplanev1.RemediatingCondition))
	}
}

// BUG 4: reconcileRemediation records the remediation (in-progress annotation and
// lastRemediation) before deleting the Machine; when the delete fails the deferred patch
// still persists them, and the control plane then waits for a replacement of a Machine that
// was never deleted (see bug 3: forever when no scale-up follows).
func TestRegressionRemediationRecordedWhenDeleteFails(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.Finalizers = []string{Finalizer}
	f.objs = append(f.objs, clusterPKI(t)...)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour, unhealthy())
	f.machine("m3", time.Hour)
	f.interceptor = &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*clusterv1.Machine); ok {
			return errors.New("admission webhook denied the request")
		}
		return c.Delete(ctx, obj, opts...)
	}}
	e := f.build()
	e.firstReconcile(ctx)
	if _, err := e.r.Reconcile(ctx, kcpRequest); err == nil {
		t.Fatal("no error though the delete failed")
	}
	kcp := e.getKCP()
	if v, ok := kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		t.Errorf("in-progress annotation persisted though m2 was not deleted: %s", v)
	}
	if kcp.Status.LastRemediation.Machine != "" {
		t.Errorf("lastRemediation persisted though m2 was not deleted: %+v", kcp.Status.LastRemediation)
	}
}

// BUG 5 (cosmetic): with a missing KairosConfigTemplate the ScalingUp message repeats the
// same line: scaleUp halts with configTemplateErr as the wait message, and blockers() adds
// configTemplateErr again.
func TestRegressionScalingUpMessageRepeatsTemplateError(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "missing"}
	f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	updateStatus(ctx, s)
	c := conditions.Get(f.kcp, controlplanev1.ScalingUpCondition)
	if n := strings.Count(c.Message, "KairosConfigTemplate missing does not exist"); n != 1 {
		t.Errorf("ScalingUp message = %q: the error appears %d times", c.Message, n)
	}
}

// BUG 6: reconcilePreTerminateHooks' doc says members are removed "only while the remaining
// members keep quorum", but it never checks: a Machine deleted by hand (kubectl delete
// machine) while another member is down gets its member removed, and etcd loses quorum.
func TestRegressionPreTerminateHookIgnoresQuorum(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", 3*time.Hour, deleting(time.Minute, clusterv1.MachineDeletingWaitingForPreTerminateHookReason))
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour, notReady())
	// m3's etcd is dead; k0s still reports its EtcdMember Joined, as real k0s does.
	f.member("m3").state = memberDown
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcilePreTerminateHooks(ctx, s); err != nil {
		t.Fatal(err)
	}
	if leave, _, _ := unstructured.NestedBool(e.getK0sMember("m1").Object, "spec", "leave"); leave {
		t.Errorf("m1's member asked to leave with 2 of 3 members healthy: 1 of 2 would remain (%s)", s.waitMessage)
	}
}

// BUG 7 (minor): when reconcileDelete fails before it knows what it waits for (listing
// Machines fails), updateStatus sets the Deleting condition with an empty reason, which the
// API server rejects (reason is required), so the status patch fails as well.
func TestRegressionDeletingConditionEmptyReasonOnError(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
	f.kcp.Finalizers = []string{Finalizer}
	calls := 0
	f.interceptor = &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*clusterv1.MachineList); ok {
			calls++
			if calls > 1 { // newScope's list passes, reconcileDelete's fails
				return errors.New("etcd timeout")
			}
		}
		return c.List(ctx, list, opts...)
	}}
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileDelete(ctx, s); err == nil {
		t.Fatal("no error")
	}
	updateStatus(ctx, s)
	if c := conditions.Get(f.kcp, controlplanev1.DeletingCondition); c == nil || c.Reason == "" {
		t.Errorf("Deleting = %+v, want a reason", c)
	}
}
