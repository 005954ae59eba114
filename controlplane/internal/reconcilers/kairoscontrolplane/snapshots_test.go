package kairoscontrolplane

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// hourlySnapshots: a control plane of three Machines (created 3 h, 2 h and 1 h ago) taking
// snapshots every hour.
func hourlySnapshots(f *fixture) {
	f.kcp.Spec.Etcd.Snapshots = testSnapshots()
	f.kcp.Spec.Etcd.Snapshots.Schedule = "0 * * * *"
	settled(f)
}

// listed is a listing at f.now holding a snapshot of each node taken that long ago.
func listed(now time.Time, ages map[string]time.Duration) snapshotListing {
	l := snapshotListing{at: now, newest: map[string]etcdsnapshots.Snapshot{}}
	for node, age := range ages {
		t := now.Add(-age).Truncate(time.Second).UTC()
		name := fmt.Sprintf("c-%s-%d", node, t.Unix())
		l.newest[node] = etcdsnapshots.Snapshot{Node: node, Name: name, Key: "f/" + name, Kind: etcdsnapshots.KindScheduled, Time: t, Size: 42}
	}
	return l
}

func TestSetEtcdSnapshotsUpToDateCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.EtcdSnapshotsUpToDateCondition, withoutContext(setEtcdSnapshotsUpToDateCondition), []conditionCase{
		{name: "every node has a recent snapshot", setup: hourlySnapshots,
			observe: func(s *scope) {
				s.snapshots = listed(s.reconcileTime, map[string]time.Duration{"m1": 30 * time.Minute, "m2": 50 * time.Minute, "m3": 10 * time.Minute})
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdSnapshotsUpToDateReason}},
		{name: "a node missed two scheduled snapshots", setup: hourlySnapshots,
			observe: func(s *scope) {
				s.snapshots = listed(s.reconcileTime, map[string]time.Duration{"m1": 3 * time.Hour, "m2": 50 * time.Minute, "m3": 10 * time.Minute})
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdSnapshotsStaleReason,
				Message: "Machine m1: the newest snapshot, c-m1-"}, partial: true},
		{name: "no snapshot yet: only a Machine older than two scheduled times counts", setup: hourlySnapshots,
			observe: func(s *scope) {
				s.snapshots = listed(s.reconcileTime, map[string]time.Duration{"m2": 50 * time.Minute})
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdSnapshotsStaleReason,
				Message: `Machine m1: no snapshot since the Machine was created, and the schedule "0 * * * *" has passed twice since`}, partial: true},
		{name: "store unreachable", setup: hourlySnapshots,
			observe: func(s *scope) {
				s.snapshots = snapshotListing{at: s.reconcileTime, err: fmt.Errorf("listing s3://site-backups/default/c/: 403 Forbidden")}
			},
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.EtcdSnapshotsStoreUnreachable,
				Message: "listing s3://site-backups/default/c/: 403 Forbidden"}},
		{name: "not initialized", setup: func(f *fixture) { hourlySnapshots(f); f.notInitialized() },
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.EtcdSnapshotsUnknownReason,
				Message: "The store is listed once the control plane is initialized"}},
	})
}

// Without snapshots there is no condition and no status; a listing that failed keeps what the
// last good one reported.
func TestSetEtcdSnapshotsStatus(t *testing.T) {
	f := newFixture(t)
	hourlySnapshots(f)
	s := statusScope(t, f)
	s.snapshots = listed(s.reconcileTime, map[string]time.Duration{"m1": time.Minute, "gone": time.Minute})
	setEtcdSnapshotsStatus(s)
	got := f.kcp.Status.Etcd.Snapshots
	if len(got) != 1 || got[0].Machine != "m1" || got[0].Node != "m1" || got[0].Location != "s3://site-backups/"+s.snapshots.newest["m1"].Key || got[0].SizeBytes != 42 {
		t.Fatalf("status %+v", got)
	}
	s.snapshots = snapshotListing{at: s.reconcileTime, err: fmt.Errorf("unreachable")}
	setEtcdSnapshotsStatus(s)
	if len(f.kcp.Status.Etcd.Snapshots) != 1 {
		t.Errorf("a failed listing dropped the last good one: %+v", f.kcp.Status.Etcd.Snapshots)
	}

	f.kcp.Spec.Etcd.Snapshots = nil
	conditions.Set(f.kcp, metav1.Condition{Type: controlplanev1.EtcdSnapshotsUpToDateCondition, Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdSnapshotsUpToDateReason})
	setEtcdSnapshotsStatus(s)
	setEtcdSnapshotsUpToDateCondition(s)
	if f.kcp.Status.Etcd.Snapshots != nil || conditions.Get(f.kcp, controlplanev1.EtcdSnapshotsUpToDateCondition) != nil {
		t.Errorf("snapshots turned off, but status %+v, condition %+v", f.kcp.Status.Etcd.Snapshots, conditions.Get(f.kcp, controlplanev1.EtcdSnapshotsUpToDateCondition))
	}
}

// reconcileEtcdSnapshots lists the store with the credentials Secret, at most once per
// snapshotListInterval, and says which Secret or key is missing without any value.
func TestReconcileEtcdSnapshots(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	hourlySnapshots(f)
	store := serveStore(t, f, "m1")
	requests := &store.requests
	e := f.build()

	s := e.scope(ctx)
	if _, err := e.r.reconcileEtcdSnapshots(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.snapshots.err == nil || s.snapshots.err.Error() != "the credentials Secret s3 (spec.etcd.snapshots.s3.credentialsSecret) does not exist" || requests.Load() != 0 {
		t.Fatalf("without the Secret: %v, %d requests", s.snapshots.err, requests.Load())
	}

	secret := s3Secret()
	secret.Data[bootstrapv1.EtcdSnapshotAccessKeyIDKey] = []byte("AKIAFIXTURE\n") // as written by echo: trimmed
	if err := e.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	e.r.snapshotListings = snapshotListings{} // forget the failed listing
	s = e.scope(ctx)
	res, err := e.r.reconcileEtcdSnapshots(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if s.snapshots.err != nil || s.snapshots.newest["m1"].Name != clusterName+"-m1-1764403200" || requests.Load() != 1 || res.RequeueAfter != snapshotListInterval {
		t.Fatalf("listing: %+v, %d requests, %+v", s.snapshots, requests.Load(), res)
	}
	// Within the interval the listing is not repeated.
	s = e.scope(ctx)
	s.reconcileTime = s.reconcileTime.Add(time.Minute)
	if _, err := e.r.reconcileEtcdSnapshots(ctx, s); err != nil || requests.Load() != 1 || s.snapshots.newest["m1"].Name == "" {
		t.Errorf("second reconcile: %v, %d requests", err, requests.Load())
	}
	s = e.scope(ctx)
	s.reconcileTime = s.reconcileTime.Add(snapshotListInterval)
	if _, err := e.r.reconcileEtcdSnapshots(ctx, s); err != nil || requests.Load() != 2 {
		t.Errorf("after the interval: %v, %d requests", err, requests.Load())
	}

	delete(secret.Data, bootstrapv1.EtcdSnapshotSecretAccessKeyKey)
	if err := e.c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	e.r.snapshotListings = snapshotListings{}
	s = e.scope(ctx)
	if _, err := e.r.reconcileEtcdSnapshots(ctx, s); err != nil || s.snapshots.err == nil || s.snapshots.err.Error() != "the credentials Secret s3 has no key secretAccessKey" {
		t.Errorf("without the secret key: %v, %v", err, s.snapshots.err)
	}
}

// A listing that failed is tried again soon; a good one is kept for the whole interval.
func TestSnapshotListingInterval(t *testing.T) {
	var c snapshotListings
	now := time.Now()
	c.put("failed", snapshotListing{at: now, err: fmt.Errorf("the Secret does not exist")})
	c.put("listed", snapshotListing{at: now})
	if _, fresh := c.get("failed", now.Add(snapshotRetryInterval)); fresh {
		t.Error("a failed listing is kept past snapshotRetryInterval")
	}
	if _, fresh := c.get("listed", now.Add(snapshotRetryInterval)); !fresh {
		t.Error("a good listing is not kept for snapshotListInterval")
	}
	if _, fresh := c.get("listed", now.Add(snapshotListInterval)); fresh {
		t.Error("a good listing is kept past snapshotListInterval")
	}
}

// The listings of control planes that are gone (deleted, or snapshots turned off) are dropped:
// no reconcile asks for them again, and a long-lived manager of a changing fleet must not keep
// one per control plane it ever saw.
func TestSnapshotListingsForgetWhatNoOneAsksFor(t *testing.T) {
	var c snapshotListings
	now := time.Now()
	c.put("deleted", snapshotListing{at: now})
	c.put("failed", snapshotListing{at: now, err: fmt.Errorf("the store is unreachable")})
	later := now.Add(snapshotListInterval)
	c.put("live", snapshotListing{at: later})
	if len(c.m) != 1 {
		t.Errorf("after %s the listings of %d control planes are kept, want only the live one's: %v", snapshotListInterval, len(c.m), c.m)
	}
	if _, fresh := c.get("live", later); !fresh {
		t.Error("the listing just put is not fresh")
	}
	// A listing still in use is kept by the next sweep.
	c.put("other", snapshotListing{at: later.Add(snapshotListInterval - time.Second)})
	c.put("next", snapshotListing{at: later.Add(snapshotListInterval)})
	if _, ok := c.m["other"]; !ok {
		t.Error("a listing put less than its interval ago was dropped")
	}
}

// fakeStore is an S3 endpoint for the control plane's listings: it counts them, answers 503
// while down, 403 to any access key but s3Secret's, and otherwise lists one snapshot of a node.
type fakeStore struct {
	requests atomic.Int32
	down     atomic.Bool
}

// serveStore starts a fakeStore listing a snapshot of node and points f's spec.etcd.snapshots
// (set already) at it, trusting its certificate.
func serveStore(t *testing.T, f *fixture, node string) *fakeStore {
	t.Helper()
	st := &fakeStore{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.requests.Add(1)
		switch {
		case st.down.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		case !strings.Contains(r.Header.Get("Authorization"), "Credential=AKIAFIXTURE/"):
			w.WriteHeader(http.StatusForbidden)
		default:
			fmt.Fprintf(w, `<ListBucketResult><Contents><Key>%s%s-%s-1764403200</Key><Size>9</Size></Contents></ListBucketResult>`, r.URL.Query().Get("prefix"), clusterName, node)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	f.kcp.Spec.Etcd.Snapshots.S3.Endpoint = u.Host
	f.kcp.Spec.Etcd.Snapshots.S3.CABundle = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return st
}

// s3Secret is the credentials Secret (testSnapshots' "s3") that a fakeStore accepts.
func s3Secret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "s3"}, Data: map[string][]byte{
		bootstrapv1.EtcdSnapshotAccessKeyIDKey: []byte("AKIAFIXTURE"), bootstrapv1.EtcdSnapshotSecretAccessKeyKey: []byte("fixture-secret"),
	}}
}
