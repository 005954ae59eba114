package kairoscontrolplane

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// The etcd-snapshot-request annotation reaches the workload cluster's
// kube-system/kairos-capi-etcd-snapshot-request once per value, and the status echoes it; nothing
// is written for a value already handed over, before the control plane is initialized, without
// snapshots, or for a value the webhook would refuse.
func TestReconcileEtcdSnapshotRequest(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(f *fixture)
		// existing is the request ConfigMap's value before the reconcile, "" for none.
		existing string
		// want is its value after, and wantStatus the status' value.
		want, wantStatus string
		wantRequeue      time.Duration
	}{
		"no annotation": {setup: func(f *fixture) {}},
		"a new request": {setup: func(f *fixture) {
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "2026-11-29T22-40-00Z"
		},
			want: "2026-11-29T22-40-00Z", wantStatus: "2026-11-29T22-40-00Z"},
		"a new request replaces the last": {setup: func(f *fixture) {
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "r2"
			f.kcp.Status.Etcd.SnapshotRequest = controlplanev1.EtcdSnapshotRequestStatus{Value: "r1", Time: metav1.NewTime(f.now.Add(-time.Hour))}
		}, existing: "r1", want: "r2", wantStatus: "r2"},
		"handed over already: no write": {setup: func(f *fixture) {
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "r1"
			f.kcp.Status.Etcd.SnapshotRequest = controlplanev1.EtcdSnapshotRequestStatus{Value: "r1", Time: metav1.NewTime(f.now.Add(-time.Hour))}
		}, existing: "changed-by-someone", want: "changed-by-someone", wantStatus: "r1"},
		"not initialized": {setup: func(f *fixture) {
			f.notInitialized()
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "r1"
		}},
		"without snapshots": {setup: func(f *fixture) {
			f.kcp.Spec.Etcd.Snapshots = nil
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "r1"
		}},
		"a value the webhook refuses": {setup: func(f *fixture) { f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "$(reboot)" }},
		"the workload cluster refuses the write: tried again, nothing else held back": {setup: func(f *fixture) {
			f.kcp.Annotations[controlplanev1.EtcdSnapshotRequestAnnotation] = "r1"
			f.workloadInterceptor = &interceptor.Funcs{Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
				return errors.New("admission webhook denied the request")
			}}
		}, wantRequeue: snapshotRetryInterval},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			settled(f)
			f.kcp.Spec.Etcd.Snapshots = testSnapshots()
			if f.kcp.Annotations == nil {
				f.kcp.Annotations = map[string]string{}
			}
			tc.setup(f)
			if tc.existing != "" {
				f.workloadObjs = append(f.workloadObjs, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: render.EtcdSnapshotRequestConfigMap},
					Data:       map[string]string{render.EtcdSnapshotRequestConfigMapKey: tc.existing},
				})
			}
			e := f.build()
			s := e.scope(ctx)
			before := s.kcp.Status.Etcd.SnapshotRequest
			res, err := e.r.reconcileEtcdSnapshotRequest(ctx, s)
			if err != nil || res.RequeueAfter != tc.wantRequeue {
				t.Fatalf("result %+v, %v; want requeue after %s and no error (an error would stop the phases that follow)", res, err, tc.wantRequeue)
			}
			cm := &corev1.ConfigMap{}
			got := ""
			if err := e.wc.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: render.EtcdSnapshotRequestConfigMap}, cm); err == nil {
				got = cm.Data[render.EtcdSnapshotRequestConfigMapKey]
			}
			if got != tc.want {
				t.Errorf("the workload cluster's request is %q, want %q", got, tc.want)
			}
			if at := cm.Data[render.EtcdSnapshotRequestedAtKey]; got != tc.existing && at != strconv.FormatInt(s.reconcileTime.Unix(), 10) {
				t.Errorf("the request says it was made at %q, want the reconcile's %d", at, s.reconcileTime.Unix())
			}
			status := s.kcp.Status.Etcd.SnapshotRequest
			if status.Value != tc.wantStatus {
				t.Errorf("status.etcd.snapshotRequest = %+v, want value %q", status, tc.wantStatus)
			}
			if status.Value != before.Value && !status.Time.Time.Equal(s.reconcileTime) {
				t.Errorf("status.etcd.snapshotRequest.time = %s, want the reconcile's %s", status.Time, s.reconcileTime)
			}
		})
	}
}

// For a few minutes after a request the store is listed every snapshotRetryInterval (never from
// a listing older than the request) until every node shows an on-demand snapshot taken since;
// then, and after snapshotRequestWindow, at the usual interval.
func TestReconcileEtcdSnapshotsAfterARequest(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.replicas(1)
	f.kcp.Spec.Etcd.Snapshots = testSnapshots()
	store := serveStore(t, f, "m1") // lists only a scheduled snapshot
	requests := &store.requests
	f.machine("m1", time.Hour)
	f.kcp.Status.Etcd.SnapshotRequest = controlplanev1.EtcdSnapshotRequestStatus{Value: "r1", Time: metav1.NewTime(f.now)}
	e := f.build()
	if err := e.c.Create(ctx, s3Secret()); err != nil {
		t.Fatal(err)
	}
	reconcile := func(at time.Time) time.Duration {
		t.Helper()
		s := e.scope(ctx)
		s.reconcileTime = at
		res, err := e.r.reconcileEtcdSnapshots(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return res.RequeueAfter
	}
	// A good listing from a minute before the request is of no use.
	e.r.snapshotListings.put(f.kcp.UID, listed(f.now.Add(-time.Minute), map[string]time.Duration{"m1": time.Hour}))
	if requeue := reconcile(f.now.Add(time.Second)); requests.Load() != 1 || requeue != snapshotRetryInterval {
		t.Fatalf("after the request: %d listings, requeue %s; want 1, %s", requests.Load(), requeue, snapshotRetryInterval)
	}
	if reconcile(f.now.Add(snapshotRetryInterval / 2)); requests.Load() != 1 {
		t.Errorf("listed again within snapshotRetryInterval: %d listings", requests.Load())
	}
	if reconcile(f.now.Add(snapshotRetryInterval + time.Second)); requests.Load() != 2 {
		t.Errorf("not listed again after snapshotRetryInterval while the on-demand snapshot is not shown: %d listings", requests.Load())
	}
	// The node's on-demand snapshot is listed: back to the usual interval.
	shown := listed(f.now.Add(time.Minute), map[string]time.Duration{"m1": 0})
	snap := shown.newest["m1"]
	snap.Kind, snap.Name = etcdsnapshots.KindOnDemand, "on-demand-"+snap.Name
	shown.newest["m1"] = snap
	e.r.snapshotListings.put(f.kcp.UID, shown)
	if requeue := reconcile(f.now.Add(time.Minute + snapshotRetryInterval)); requests.Load() != 2 || requeue != snapshotListInterval-snapshotRetryInterval {
		t.Errorf("listed again although the on-demand snapshot is shown: %d listings, requeue %s", requests.Load(), requeue)
	}
	// Past the window, a request that never showed no longer speeds the listing up.
	e.r.snapshotListings.put(f.kcp.UID, listed(f.now.Add(snapshotRequestWindow), map[string]time.Duration{"m1": time.Hour}))
	if reconcile(f.now.Add(snapshotRequestWindow + snapshotRetryInterval + time.Second)); requests.Load() != 2 {
		t.Errorf("listed every snapshotRetryInterval past snapshotRequestWindow: %d listings", requests.Load())
	}
}
