package kairoscontrolplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/syntax"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// snapshotListInterval is how often the store of a control plane is listed at most: the
// condition it feeds is about scheduled snapshots hours apart, and a fleet of control planes
// must not list its buckets on every reconcile.
const snapshotListInterval = 5 * time.Minute

// snapshotListing is the result of a listing of a control plane's store.
type snapshotListing struct {
	// at is when it was listed; zero when it was not (snapshots off, not initialized).
	at time.Time
	// newest is the newest snapshot of each node found.
	newest map[string]etcdsnapshots.Snapshot
	// err says why the store could not be listed; it names no credential.
	err error
}

// snapshotListings remembers the last listing of each control plane, by uid.
type snapshotListings struct {
	mu sync.Mutex
	m  map[types.UID]snapshotListing
	// swept is when put last dropped the listings no longer used: those of control planes that
	// were deleted or turned snapshots off, which no reconcile asks for again. A fleet's manager
	// runs for months while sites come and go; the map holds only the control planes listed
	// within the last snapshotListInterval or so.
	swept time.Time
}

// snapshotRetryInterval is how soon a listing that failed is tried again: a Secret created
// after the control plane, or a store that was down, shows in the status without a long wait.
const snapshotRetryInterval = 30 * time.Second

// snapshotRestoreListInterval is how often the store is listed while a Machine restores from it
// (until its node reported the restore): the EtcdRestored condition says what the store answers
// now, such as an unreachable store the node waits for, and a restore is rare.
const snapshotRestoreListInterval = 10 * time.Second

func (c *snapshotListings) get(uid types.UID, now time.Time) (snapshotListing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[uid]
	return l, ok && now.Sub(l.at) < l.interval()
}

// interval is how long a listing is used before the store is listed again.
func (l snapshotListing) interval() time.Duration {
	if l.err != nil {
		return snapshotRetryInterval
	}
	return snapshotListInterval
}

func (c *snapshotListings) put(uid types.UID, l snapshotListing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.UID]snapshotListing{}
	}
	if l.at.Sub(c.swept) >= snapshotListInterval {
		for k, old := range c.m {
			if l.at.Sub(old.at) >= old.interval() {
				delete(c.m, k) // a live control plane's next reconcile lists its store again anyway
			}
		}
		c.swept = l.at
	}
	c.m[uid] = l
}

// reconcileEtcdSnapshots lists the control plane's store, at most every snapshotListInterval
// (every snapshotRestoreListInterval while a Machine restores, every snapshotRetryInterval for a
// few minutes after an on-demand request), for status.etcd.snapshots,
// EtcdSnapshotsUpToDate and EtcdRestored, with the credentials of spec.etcd.snapshots (a Secret
// of the control plane's namespace).
func (r *Reconciler) reconcileEtcdSnapshots(ctx context.Context, s *scope) (ctrl.Result, error) {
	spec := s.kcp.Spec.Etcd.Snapshots
	if spec == nil || !s.initialized() {
		return ctrl.Result{}, nil
	}
	interval := func(l snapshotListing) time.Duration { return l.interval() }
	switch since := s.restoringSince(); {
	case !since.IsZero():
		// A listing from before the restoring Machine existed says nothing of the store its
		// restore needs.
		interval = func(l snapshotListing) time.Duration {
			if l.at.Before(since) {
				return 0
			}
			return min(l.interval(), snapshotRestoreListInterval)
		}
	case s.snapshotRequestRecent():
		// The nodes take the requested snapshots within a minute: list until the status shows
		// snapshots taken since the request (a listing from before it never does).
		interval = func(l snapshotListing) time.Duration {
			if s.snapshotRequestShown(l) {
				return l.interval()
			}
			return min(l.interval(), snapshotRetryInterval)
		}
	case s.lastMachineAwaitsRemediation():
		// Whether the last Machine may be replaced depends on the store holding a snapshot
		// (reconcileRemediation): a listing from when the cluster was new would hold it back
		// for minutes after the first snapshot.
		interval = func(l snapshotListing) time.Duration { return min(l.interval(), snapshotRestoreListInterval) }
	}
	if l, fresh := r.snapshotListings.get(s.kcp.UID, s.reconcileTime); fresh && s.reconcileTime.Sub(l.at) < interval(l) {
		s.snapshots = l
		return ctrl.Result{RequeueAfter: interval(l) - s.reconcileTime.Sub(l.at)}, nil
	}
	l := snapshotListing{at: s.reconcileTime}
	store, err := r.snapshotStore(ctx, s, spec)
	if err == nil {
		var objs []etcdsnapshots.Object
		if objs, err = store.List(ctx); err == nil {
			l.newest = etcdsnapshots.Newest(s.cluster.Name, store.Folder, objs)
		}
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Listing the etcd snapshots failed", "reason", err.Error())
		l.err = err
	}
	r.snapshotListings.put(s.kcp.UID, l)
	s.snapshots = l
	return ctrl.Result{RequeueAfter: interval(l)}, nil
}

// snapshotStore is the cluster's folder of the store, with the credentials read from their
// Secret. The read is uncached: the manager's cache holds only Secrets labelled with a cluster
// name (common/provider/manager CacheOptions), and the user's credentials Secret need not be.
func (r *Reconciler) snapshotStore(ctx context.Context, s *scope, spec *bootstrapv1.EtcdSnapshots) (etcdsnapshots.Store, error) {
	name := spec.S3.CredentialsSecret.Name
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.kcp.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return etcdsnapshots.Store{}, fmt.Errorf("the credentials Secret %s (spec.etcd.snapshots.s3.credentialsSecret) does not exist", name)
		}
		return etcdsnapshots.Store{}, fmt.Errorf("reading the credentials Secret %s: %w", name, err)
	}
	keys := [2]string{bootstrapv1.EtcdSnapshotAccessKeyIDKey, bootstrapv1.EtcdSnapshotSecretAccessKeyKey}
	var values [2]string
	for i, k := range keys {
		v, ok := secret.Data[k]
		if !ok || len(v) == 0 {
			return etcdsnapshots.Store{}, fmt.Errorf("the credentials Secret %s has no key %s", name, k)
		}
		values[i] = strings.TrimRight(string(v), "\r\n") // as the bootstrap provider reads them
	}
	return etcdsnapshots.Store{
		Endpoint: spec.S3.Endpoint, Bucket: spec.S3.Bucket, Folder: spec.S3.Folder(s.kcp.Namespace, s.cluster.Name),
		Region: spec.S3.Region, CABundle: []byte(spec.S3.CABundle),
		AccessKeyID: values[0], SecretAccessKey: values[1],
	}, nil
}

// setEtcdSnapshotsStatus reports the newest snapshot of each control-plane Machine's node from
// the last listing. A failed listing keeps what the last good one reported.
func setEtcdSnapshotsStatus(s *scope) {
	l := s.snapshots
	switch {
	case s.kcp.Spec.Etcd.Snapshots == nil:
		s.kcp.Status.Etcd.Snapshots = nil
		return
	case l.at.IsZero() || l.err != nil:
		return
	}
	var out []controlplanev1.EtcdSnapshotStatus
	bucket := s.kcp.Spec.Etcd.Snapshots.S3.Bucket
	for _, m := range s.machines.SortedByCreationTimestamp() {
		if !m.Status.NodeRef.IsDefined() {
			continue
		}
		snap, ok := l.newest[m.Status.NodeRef.Name]
		if !ok {
			continue
		}
		out = append(out, controlplanev1.EtcdSnapshotStatus{
			Machine: m.Name, Node: snap.Node, Name: snap.Name, Location: "s3://" + bucket + "/" + snap.Key,
			Time: metav1.NewTime(snap.Time), SizeBytes: snap.Size,
		})
	}
	s.kcp.Status.Etcd.Snapshots = out
}

// setEtcdSnapshotsUpToDateCondition: False when the node of a control-plane Machine has no
// snapshot newer than the second-to-last scheduled time of spec.etcd.snapshots.schedule (it
// missed two scheduled snapshots); a Machine without any counts from when it was created. The
// schedule is read in UTC, the time zone of a Kairos node unless its image sets another.
func setEtcdSnapshotsUpToDateCondition(s *scope) {
	spec := s.kcp.Spec.Etcd.Snapshots
	if spec == nil {
		conditions.Delete(s.kcp, controlplanev1.EtcdSnapshotsUpToDateCondition)
		return
	}
	c := metav1.Condition{Type: controlplanev1.EtcdSnapshotsUpToDateCondition}
	l := s.snapshots
	cron, err := syntax.ParseCron(spec.Schedule)
	switch {
	case err != nil: // refused at admission; a CRD installed without the webhook may let it in
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdSnapshotsUnknownReason, fmt.Sprintf("spec.etcd.snapshots.schedule %q %v", spec.Schedule, err)
	case l.at.IsZero() && s.initialized():
		return // an earlier phase stopped this reconciliation before the listing: keep what it says
	case l.at.IsZero():
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdSnapshotsUnknownReason, "The store is listed once the control plane is initialized"
	case l.err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdSnapshotsStoreUnreachable, l.err.Error()
	default:
		var stale []string
		for _, m := range s.machines.SortedByCreationTimestamp() {
			if !m.Status.NodeRef.IsDefined() || !m.DeletionTimestamp.IsZero() {
				continue
			}
			since, what := m.CreationTimestamp.Time, "no snapshot since the Machine was created"
			if snap, ok := l.newest[m.Status.NodeRef.Name]; ok {
				since, what = snap.Time, fmt.Sprintf("the newest snapshot, %s, is of %s", snap.Name, snap.Time.UTC().Format(time.RFC3339))
			}
			if due := cron.Next(cron.Next(since)); !due.IsZero() && l.at.After(due) {
				stale = append(stale, fmt.Sprintf("Machine %s: %s, and the schedule %q has passed twice since", m.Name, what, spec.Schedule))
			}
		}
		if len(stale) > 0 {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.EtcdSnapshotsStaleReason, bullets(stale)
		} else {
			c.Status, c.Reason = metav1.ConditionTrue, controlplanev1.EtcdSnapshotsUpToDateReason
		}
	}
	conditions.Set(s.kcp, c)
}
