package kairoscontrolplane

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
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
		// While it restores, the condition says what the management cluster sees of the store
		// (its own listing, renewed while a Machine restores): the node, which cannot report
		// anything before Kubernetes starts, most likely waits for the same reason.
		{name: "restoring, the store cannot be listed", setup: restoringControlPlane,
			observe: func(s *scope) {
				s.restore = etcdRestore{machine: "m1"}
				s.snapshots = snapshotListing{at: s.reconcileTime, err: errors.New(`listing s3://site-backups/team-a/demo/: Get "https://s3.example.com/site-backups?list-type=2&prefix=team-a%2Fdemo%2F": EOF`)}
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdRestoringReason,
				Message: `Machine m1 restores the newest etcd snapshot of the cluster before its node starts Kubernetes; the store cannot be listed from the management cluster (listing s3://site-backups/team-a/demo/: Get "https://s3.example.com/site-backups?list-type=2&prefix=team-a%2Fdemo%2F": EOF): a node that cannot reach it either waits for it and restores once it answers (the node's journal, the distribution's unit, says why)`}},
		{name: "restoring, the store holds no snapshot of the cluster", setup: restoringControlPlane,
			observe: func(s *scope) {
				s.restore = etcdRestore{machine: "m1"}
				s.snapshots = snapshotListing{at: s.reconcileTime, newest: map[string]etcdsnapshots.Snapshot{}}
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdRestoringReason,
				Message: "Machine m1 restores the newest etcd snapshot of the cluster before its node starts Kubernetes, but s3://site-backups/team-a/demo/ holds no snapshot of the cluster: its node does not start until one is there"}},
		{name: "restoring, the store holds snapshots", setup: restoringControlPlane,
			observe: func(s *scope) {
				s.restore = etcdRestore{machine: "m1"}
				s.snapshots = listed(s.reconcileTime, map[string]time.Duration{"m0": time.Hour})
			},
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

// While a Machine restores, the store is listed again: a listing from before the Machine was
// created says nothing of the store the restore needs, and the EtcdRestored condition says what
// the store answers now (every snapshotRestoreListInterval), not what it answered minutes ago.
func TestReconcileEtcdSnapshotsWhileRestoring(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	restoringControlPlane(f)
	store := serveStore(t, f, "m0")
	requests, down := &store.requests, &store.down
	e := f.build()
	if err := e.c.Create(ctx, s3Secret()); err != nil {
		t.Fatal(err)
	}
	// The last listing, a good one, was taken before the lost Machine's replacement (m1,
	// created a minute ago) existed; the store went down since.
	e.r.snapshotListings.put(f.kcp.UID, listed(f.now.Add(-2*time.Minute), map[string]time.Duration{"m0": time.Hour}))
	down.Store(true)

	reconcile := func(at time.Time) (*scope, time.Duration) {
		t.Helper()
		s := e.scope(ctx)
		s.reconcileTime = at
		if _, err := e.r.reconcileEtcdRestore(ctx, s); err != nil {
			t.Fatal(err)
		}
		res, err := e.r.reconcileEtcdSnapshots(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		setEtcdRestoredCondition(s)
		return s, res.RequeueAfter
	}
	s, requeue := reconcile(f.now)
	if requests.Load() != 1 || s.snapshots.err == nil || requeue != snapshotRestoreListInterval {
		t.Fatalf("a listing from before the restoring Machine was used: %d requests, listing %+v, requeue %s", requests.Load(), s.snapshots, requeue)
	}
	containsAll(t, "EtcdRestored", conditions.Get(f.kcp, controlplanev1.EtcdRestoredCondition).Message,
		"Machine m1 restores", "the store cannot be listed from the management cluster", "503 Service Unavailable")
	if _, _ = reconcile(f.now.Add(snapshotRestoreListInterval / 2)); requests.Load() != 1 {
		t.Errorf("listed again within snapshotRestoreListInterval: %d requests", requests.Load())
	}
	down.Store(false)
	s, _ = reconcile(f.now.Add(snapshotRestoreListInterval))
	if requests.Load() != 2 || s.snapshots.err != nil || s.snapshots.newest["m0"].Name != clusterName+"-m0-1764403200" {
		t.Fatalf("not listed again after snapshotRestoreListInterval: %d requests, listing %+v", requests.Load(), s.snapshots)
	}
	if c := conditions.Get(f.kcp, controlplanev1.EtcdRestoredCondition); c.Status != metav1.ConditionFalse || strings.Contains(c.Message, "cannot be listed") {
		t.Errorf("the store is back, EtcdRestored still says %+v", c)
	}
}

// While the only Machine waits for its remediation, the store is listed every
// snapshotRestoreListInterval: the listing from when the cluster was new (no snapshot yet) must
// not hold the replacement back for the whole snapshotListInterval once a snapshot is there.
func TestReconcileEtcdSnapshotsBeforeRemediatingTheLastMachine(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.replicas(1)
	f.kcp.Spec.Etcd.Snapshots = testSnapshots()
	store := serveStore(t, f, "m1")
	requests := &store.requests
	f.machine("m1", time.Hour, unhealthy())
	e := f.build()
	if err := e.c.Create(ctx, s3Secret()); err != nil {
		t.Fatal(err)
	}
	// Listed a moment ago, before the first snapshot.
	e.r.snapshotListings.put(f.kcp.UID, snapshotListing{at: f.now.Add(-5 * time.Second)})
	s := e.scope(ctx)
	s.reconcileTime = f.now
	if _, err := e.r.reconcileEtcdSnapshots(ctx, s); err != nil {
		t.Fatal(err)
	}
	if requests.Load() != 0 {
		t.Fatalf("listed again %d times within snapshotRestoreListInterval", requests.Load())
	}
	if _, err := e.r.reconcileRemediation(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := e.deletedMachines(); len(got) != 0 {
		t.Fatalf("remediated %v while the store held no snapshot", got)
	}
	s = e.scope(ctx)
	s.reconcileTime = f.now.Add(snapshotRestoreListInterval)
	res, err := e.r.reconcileEtcdSnapshots(ctx, s)
	if err != nil || requests.Load() != 1 || res.RequeueAfter != snapshotRestoreListInterval {
		t.Fatalf("not listed again after snapshotRestoreListInterval: %v, %d requests, requeue %s", err, requests.Load(), res.RequeueAfter)
	}
	if _, err := e.r.reconcileRemediation(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := e.deletedMachines(); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("deleted %v once the store held a snapshot, want [m1]", got)
	}
}
