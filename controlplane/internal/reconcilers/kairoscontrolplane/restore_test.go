package kairoscontrolplane

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// restoringControlPlane has one Machine, m1, whose KairosConfig restores the newest snapshot.
func restoringControlPlane(f *fixture) {
	f.replicas(1)
	f.kcp.Spec.Etcd.Snapshots = testSnapshots()
	f.machine("m1", time.Minute)
	f.configs["m1"].Spec.EtcdSnapshots.Restore = bootstrapv1.EtcdSnapshotRestoreNewest
}

func TestSetEtcdRestoredCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.EtcdRestoredCondition, withoutContext(setEtcdRestoredCondition), []conditionCase{
		{name: "restoring", setup: restoringControlPlane,
			observe: func(s *scope) { s.restore = etcdRestore{machine: "m1"} },
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdRestoringReason,
				Message: "Machine m1 restores the newest etcd snapshot of the cluster before its node starts Kubernetes; if it stays here, the node's journal (the distribution's unit) says why"}},
		{name: "restored", setup: restoringControlPlane,
			observe: func(s *scope) {
				s.restore = etcdRestore{machine: "m1", snapshot: "pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz", restored: "2025-11-29T09:00:00Z", node: "m1"}
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdRestoredReason,
				Message: "Machine m1 restored etcd snapshot pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz (taken 2025-11-29T08:01:40Z) on node m1 at 2025-11-29T09:00:00Z"}},
	})
}

// A control plane that never restored has no EtcdRestored condition; once the restoring Machine
// is gone (replaced, or scaled past), the condition keeps describing the last restore.
func TestSetEtcdRestoredConditionLeftAlone(t *testing.T) {
	f := newFixture(t)
	settled(f)
	s := statusScope(t, f)
	setEtcdRestoredCondition(s)
	if c := conditions.Get(f.kcp, controlplanev1.EtcdRestoredCondition); c != nil {
		t.Fatalf("set without a restore: %+v", c)
	}
	last := metav1.Condition{Type: controlplanev1.EtcdRestoredCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdRestoredReason, Message: "Machine m0 restored etcd snapshot x-1 (taken …)"}
	conditions.Set(f.kcp, last)
	setEtcdRestoredCondition(s)
	if c := conditions.Get(f.kcp, controlplanev1.EtcdRestoredCondition); c == nil || c.Message != last.Message {
		t.Errorf("the record of the last restore changed: %+v", c)
	}
}

// reconcileEtcdRestore reads the node's report from the restored cluster only while it is
// needed, and only a report of the restoring Machine's own node.
func TestReconcileEtcdRestore(t *testing.T) {
	report := func(node string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: render.EtcdRestoreConfigMap},
			Data:       map[string]string{"snapshot": "site-a-site-a-cp-x7k2p-1764403200", "restored": "2025-11-29T09:00:00Z", "node": node},
		}
	}
	for name, tc := range map[string]struct {
		setup  func(f *fixture)
		report *corev1.ConfigMap
		want   etcdRestore
	}{
		"no restoring Machine": {setup: settled, report: report("m1")},
		"reported": {setup: restoringControlPlane, report: report("m1"),
			want: etcdRestore{machine: "m1", snapshot: "site-a-site-a-cp-x7k2p-1764403200", restored: "2025-11-29T09:00:00Z", node: "m1"}},
		"not reported yet": {setup: restoringControlPlane, want: etcdRestore{machine: "m1"}},
		"an earlier restore's report (kept in the snapshot)": {setup: restoringControlPlane, report: report("m0"), want: etcdRestore{machine: "m1"}},
		"already in the condition": {setup: func(f *fixture) {
			restoringControlPlane(f)
			conditions.Set(f.kcp, metav1.Condition{Type: controlplanev1.EtcdRestoredCondition, Status: metav1.ConditionTrue,
				Reason: controlplanev1.EtcdRestoredReason, Message: restoredPrefix("m1") + "x"})
		}, report: report("m1"), want: etcdRestore{machine: "m1", reported: true}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			if tc.report != nil {
				if err := e.wc.Create(ctx, tc.report); err != nil {
					t.Fatal(err)
				}
			}
			s := e.scope(ctx)
			if _, err := e.r.reconcileEtcdRestore(ctx, s); err != nil {
				t.Fatal(err)
			}
			if s.restore != tc.want {
				t.Errorf("restore %+v, want %+v", s.restore, tc.want)
			}
		})
	}
}
