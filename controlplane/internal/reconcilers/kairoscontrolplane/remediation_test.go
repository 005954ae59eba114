package kairoscontrolplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	"github.com/kairos-capi/kairos-capi/common/provider/phases"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// remediationFor is the annotation a replacement Machine carries.
func remediationFor(t *testing.T, replaced string, at time.Time, retry int32) func(*clusterv1.Machine) {
	t.Helper()
	raw, err := json.Marshal(remediationData{Machine: replaced, Timestamp: metav1.NewTime(at), RetryCount: retry})
	if err != nil {
		t.Fatal(err)
	}
	return withAnnotation(controlplanev1.RemediationForAnnotation, string(raw))
}

func TestReconcileRemediation(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
		// wantDeleted is the Machine remediated, "" for none.
		wantDeleted string
		wantRetry   int32
		wantReason  string
		wantMessage string
		// wantBlocked is the OwnerRemediated reason set on the unhealthy Machine when blocked.
		wantBlocked string
		wantRequeue time.Duration
		wantErr     string
	}{
		{name: "healthy control plane",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
			}},
		{name: "unhealthy Machine is deleted",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
			},
			wantDeleted: "m2", wantReason: controlplanev1.RemediatingReason, wantMessage: "deleting unhealthy Machine m2"},
		{name: "the oldest of two unhealthy Machines",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", time.Hour, unhealthy())
				f.machine("m3", 2*time.Hour, unhealthy(), notReady())
				f.machine("m4", 2*time.Hour)
				f.machine("m5", 2*time.Hour)
				f.replicas(5)
			},
			wantDeleted: "m3", wantReason: controlplanev1.RemediatingReason},
		{name: "infrastructure gone and member dead, but no MachineHealthCheck verdict: left alone",
			// As KubeadmControlPlane does, a Machine whose infrastructure object was deleted (the VM
			// vanished) is not remediated by the control plane itself: a MachineHealthCheck marks it
			// once its Node goes Unknown (lifecycle TestVanishedVMIsReplaced).
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineInfrastructureReadyCondition, metav1.ConditionFalse, clusterv1.MachineInfrastructureDeletedReason))
				f.machine("m3", time.Hour)
				f.member("m2").state = memberDown
			}},
		{name: "health check failed but owner remediation not requested",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, "UnhealthyNode"))
				f.machine("m3", time.Hour)
			}},
		{name: "unhealthy Machine already deleting",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy(), deleting(time.Minute, ""))
				f.machine("m3", time.Hour)
			}},
		{name: "remediation in progress: wait for the replacement",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m3", time.Hour, unhealthy())
				f.kcp.Annotations = map[string]string{controlplanev1.RemediationInProgressAnnotation: `{"machine":"m2","timestamp":"` + f.now.UTC().Format(time.RFC3339) + `","retryCount":0}`}
			},
			wantReason: controlplanev1.RemediatingReason, wantMessage: "waiting for the replacement of the remediated Machine"},
		{name: "a stale in-progress record (its replacement exists) is cleared",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m3", 2*time.Hour)
				f.machine("m4", time.Minute)
				f.kcp.Annotations = map[string]string{controlplanev1.RemediationInProgressAnnotation: `{"machine":"m2","timestamp":"` + f.now.Add(-time.Hour).UTC().Format(time.RFC3339) + `","retryCount":0}`}
			}},
		{name: "another Machine still provisioning: deferred",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.machine("m4", time.Minute, withoutNode())
				f.replicas(5)
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason,
			wantMessage: "waiting for Machine(s) m4 to finish provisioning before remediating Machine m2", wantRequeue: requeueWhileBusy},
		{name: "another Machine deleting: deferred",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.machine("m4", time.Hour, deleting(time.Minute, ""))
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason,
			wantMessage: "waiting for Machine(s) m4 to be deleted before remediating Machine m2", wantRequeue: requeueWhileBusy},
		{name: "the most broken first: a dead etcd member before an older Machine",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, unhealthy())
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.machine("m4", time.Hour)
				f.machine("m5", time.Hour)
				f.replicas(5)
				f.member("m2").state = memberDown
			},
			wantDeleted: "m2", wantReason: controlplanev1.RemediatingReason},
		{name: "replacement failed within minHealthyPeriod: retry counted",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 10*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-10*time.Minute), 0))
			},
			wantDeleted: "m4", wantRetry: 1, wantReason: controlplanev1.RemediatingReason},
		{name: "maxRetry exceeded: blocked",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](1)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 10*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-10*time.Minute), 1))
			},
			wantReason: controlplanev1.RemediationLimitReachedReason, wantBlocked: controlplanev1.RemediationLimitReachedReason,
			wantMessage: "Machine m4 replaces m3 and failed too: 1 remediation retries reached spec.remediation.maxRetry 1"},
		{name: "maxRetry 0: the first remediation is allowed",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](0)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
			},
			wantDeleted: "m2", wantReason: controlplanev1.RemediatingReason},
		{name: "maxRetry 0: no retry",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](0)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 10*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-10*time.Minute), 0))
			},
			wantReason: controlplanev1.RemediationLimitReachedReason, wantBlocked: controlplanev1.RemediationLimitReachedReason},
		{name: "maxRetry not reached",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](3)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 10*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-10*time.Minute), 2))
			},
			wantDeleted: "m4", wantRetry: 3, wantReason: controlplanev1.RemediatingReason},
		{name: "retryPeriod not elapsed: deferred",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.RetryPeriodSeconds = ptr.To[int32](600)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 2*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-2*time.Minute), 0))
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason, wantMessage: "remediation of Machine m4 deferred until",
			wantRequeue: 8 * time.Minute},
		{name: "retryPeriod elapsed",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.RetryPeriodSeconds = ptr.To[int32](600)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m4", 20*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-20*time.Minute), 0))
			},
			wantDeleted: "m4", wantRetry: 1, wantReason: controlplanev1.RemediatingReason},
		{name: "replacement healthy longer than the default minHealthyPeriod: count reset",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](1)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 3*time.Hour)
				f.machine("m4", 2*time.Hour, unhealthy(), remediationFor(t, "m3", f.now.Add(-2*time.Hour), 5))
			},
			wantDeleted: "m4", wantRetry: 0, wantReason: controlplanev1.RemediatingReason},
		{name: "replacement healthy longer than a custom minHealthyPeriod: count reset",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](1)
				f.kcp.Spec.Remediation.MinHealthyPeriodSeconds = ptr.To[int32](60)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 3*time.Hour)
				f.machine("m4", 5*time.Minute, unhealthy(), remediationFor(t, "m3", f.now.Add(-5*time.Minute), 5))
			},
			wantDeleted: "m4", wantRetry: 0, wantReason: controlplanev1.RemediatingReason},
		{name: "custom minHealthyPeriod not reached: counted",
			setup: func(f *fixture) {
				f.kcp.Spec.Remediation.MaxRetry = ptr.To[int32](1)
				f.kcp.Spec.Remediation.MinHealthyPeriodSeconds = ptr.To[int32](4 * 3600)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 3*time.Hour)
				f.machine("m4", 2*time.Hour, unhealthy(), remediationFor(t, "m3", f.now.Add(-2*time.Hour), 1))
			},
			wantReason: controlplanev1.RemediationLimitReachedReason, wantBlocked: controlplanev1.RemediationLimitReachedReason},
		{name: "the only Machine of an initialized control plane",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour, unhealthy())
			},
			wantReason: controlplanev1.RemediationBlockedQuorumReason, wantBlocked: controlplanev1.RemediationBlockedQuorumReason,
			wantMessage: "Machine m1 is the only control-plane Machine"},
		{name: "the only Machine of an initialized control plane with etcd snapshots",
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.machine("m1", time.Hour, unhealthy())
			},
			wantDeleted: "m1", wantReason: controlplanev1.RemediatingReason,
			wantMessage: "deleting unhealthy Machine m1, the only control-plane Machine: its replacement restores the newest etcd snapshot"},
		{name: "the only Machine of a control plane whose store holds no snapshot of the cluster",
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.listing = &snapshotListing{at: f.now.Add(-time.Minute)}
				f.machine("m1", time.Hour, unhealthy())
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason,
			wantMessage: "Machine m1 is the only control-plane Machine and s3://site-backups/team-a/demo/ holds no etcd snapshot of the cluster: its replacement would have nothing to restore"},
		{name: "the only Machine of a control plane whose store lists a snapshot",
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.listing = &snapshotListing{at: f.now.Add(-time.Minute), newest: map[string]etcdsnapshots.Snapshot{"m1": {Name: "c-m1-1764403200"}}}
				f.machine("m1", time.Hour, unhealthy())
			},
			wantDeleted: "m1", wantReason: controlplanev1.RemediatingReason},
		{name: "the only Machine of a control plane whose store cannot be listed",
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.listing = &snapshotListing{at: f.now.Add(-time.Minute), err: fmt.Errorf("listing s3://site-backups/: connection refused")}
				f.machine("m1", time.Hour, unhealthy())
			},
			wantDeleted: "m1", wantReason: controlplanev1.RemediatingReason},
		{name: "the only Machine of a control plane with etcd snapshots, its infrastructure deleted, without a MachineHealthCheck verdict",
			// The lost single-node site: no MachineHealthCheck can judge a cluster whose API
			// server was on the lost node.
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.machine("m1", time.Hour, infrastructureGone())
			},
			wantDeleted: "m1", wantReason: controlplanev1.RemediatingReason,
			wantMessage: "deleting Machine m1, whose TestMachine was deleted, the only control-plane Machine: its replacement restores the newest etcd snapshot"},
		{name: "the only Machine with etcd snapshots, its infrastructure deleted, and a store that holds no snapshot of the cluster",
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.listing = &snapshotListing{at: f.now.Add(-time.Minute)}
				f.machine("m1", time.Hour, infrastructureGone())
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason,
			wantMessage: "Machine m1 is the only control-plane Machine and s3://site-backups/team-a/demo/ holds no etcd snapshot of the cluster"},
		{name: "the only Machine without etcd snapshots, its infrastructure deleted: left alone",
			// Its replacement would start an empty etcd: exactly as without the infrastructure's
			// word (issue 34 (d)).
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour, infrastructureGone())
			}},
		{name: "the only Machine with etcd snapshots, its infrastructure not ready for another reason: left alone",
			// Powered off, or cut off from the management cluster: the node may still run at the
			// site, and a restore beside it would serve the endpoint with diverging data.
			setup: func(f *fixture) {
				f.replicas(1)
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.machine("m1", time.Hour, withCondition(clusterv1.MachineInfrastructureReadyCondition, metav1.ConditionFalse, clusterv1.MachineInfrastructureNotReadyReason))
			}},
		{name: "one of three Machines with etcd snapshots, its infrastructure deleted: a MachineHealthCheck decides",
			setup: func(f *fixture) {
				f.kcp.Spec.Etcd.Snapshots = testSnapshots()
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, infrastructureGone())
				f.machine("m3", time.Hour)
			}},
		{name: "the only Machine of a control plane that never initialized",
			setup: func(f *fixture) {
				f.replicas(1).notInitialized()
				f.machine("m1", time.Hour, unhealthy(), withoutNode())
			},
			wantDeleted: "m1", wantReason: controlplanev1.RemediatingReason},
		{name: "removing the member would lose quorum",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantReason: controlplanev1.RemediationBlockedQuorumReason, wantBlocked: controlplanev1.RemediationBlockedQuorumReason,
			wantMessage: "removing Machine m2 would lose etcd quorum: 1 of 2 voting members would be healthy, 2 needed (unhealthy: m3)", wantRequeue: requeueWhileBusy},
		{name: "the unhealthy Machine matches no member while a member matches no Machine: blocked",
			// Its controller joined etcd before the Machine had an address or a Node: the
			// unmatched member may be its own, so it counts as the one that goes.
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy(), withoutAddresses(), withoutNode())
				f.etcd.add("controller-7f3a", "10.0.7.7")
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantReason: controlplanev1.RemediationBlockedQuorumReason, wantBlocked: controlplanev1.RemediationBlockedQuorumReason,
			wantMessage: "removing Machine m2 would lose etcd quorum: Machine m2 matches no etcd member, but etcd member(s) controller-7f3a match no Machine", wantRequeue: requeueWhileBusy},
		{name: "the unhealthy Machine's member is the one down: quorum kept",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.member("m2").state = memberDown
			},
			wantDeleted: "m2", wantReason: controlplanev1.RemediatingReason},
		{name: "two Machines, both members joined",
			setup: func(f *fixture) {
				f.replicas(3)
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
			},
			wantDeleted: "m2", wantReason: controlplanev1.RemediatingReason},
		{name: "etcd unreadable: deferred",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy())
				f.machine("m3", time.Hour)
				f.member("m1").state = memberDown
				f.member("m3").state = memberDown
			},
			wantReason: controlplanev1.RemediationDeferredReason, wantBlocked: controlplanev1.RemediationDeferredReason,
			wantMessage: "cannot check etcd quorum before remediating Machine m2", wantRequeue: requeueWhileBusy},
		{name: "unreadable remediation annotation",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, unhealthy(), withAnnotation(controlplanev1.RemediationForAnnotation, "{not json"))
			},
			wantErr: "parsing remediation data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			if f.listing != nil {
				s.snapshots = *f.listing
			}
			res, err := e.r.reconcileRemediation(ctx, s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.RequeueAfter; got < tc.wantRequeue-10*time.Second || got > tc.wantRequeue {
				t.Errorf("RequeueAfter = %s, want %s", got, tc.wantRequeue)
			}
			if s.remediationReason != tc.wantReason {
				t.Errorf("remediationReason = %q, want %q", s.remediationReason, tc.wantReason)
			}
			containsAll(t, "remediation messages", strings.Join(s.remediationMessages, "\n"), tc.wantMessage)

			deleted := e.deletedMachines()
			_, inProgress := s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]
			if tc.wantDeleted == "" {
				if len(deleted) > 0 {
					t.Errorf("deleted %v, want none", deleted)
				}
				if s.halted {
					t.Errorf("halted without remediating: %s", s.waitMessage)
				}
				if inProgress && !strings.Contains(tc.name, "in progress") {
					t.Error("remediation recorded in progress without remediating")
				}
			} else {
				if !slices.Equal(deleted, []string{tc.wantDeleted}) {
					t.Fatalf("deleted %v, want [%s]", deleted, tc.wantDeleted)
				}
				if !s.halted || !strings.Contains(s.waitMessage, "remediating Machine "+tc.wantDeleted) {
					t.Errorf("halted = %v (%q), want halted while remediating", s.halted, s.waitMessage)
				}
				data, err := parseRemediationData(s.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation])
				if err != nil {
					t.Fatalf("in-progress annotation: %v", err)
				}
				if data.Machine != tc.wantDeleted || data.RetryCount != tc.wantRetry || !data.Timestamp.Time.Equal(s.reconcileTime.Truncate(time.Second)) && !data.Timestamp.Time.Equal(s.reconcileTime) {
					t.Errorf("in-progress data = %+v, want machine %s retry %d at %s", data, tc.wantDeleted, tc.wantRetry, s.reconcileTime)
				}
				last := s.kcp.Status.LastRemediation
				if last.Machine != tc.wantDeleted || last.RetryCount != tc.wantRetry || !last.Time.Time.Equal(s.reconcileTime) {
					t.Errorf("lastRemediation = %+v, want machine %s retry %d", last, tc.wantDeleted, tc.wantRetry)
				}
			}

			for _, orig := range f.machines {
				c := conditions.Get(e.getMachine(orig.Name), clusterv1.MachineOwnerRemediatedCondition)
				if orig.Name == tc.wantDeleted {
					if c == nil || c.Reason != controlplanev1.RemediatingReason || c.Message != "Machine is deleting" {
						t.Errorf("%s OwnerRemediated = %+v, want False/Remediating: Machine is deleting", orig.Name, c)
					}
					continue
				}
				if tc.wantBlocked != "" && orig.Name == firstUnhealthy(f) {
					if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.wantBlocked || c.Message == "" {
						t.Errorf("%s OwnerRemediated = %+v, want False/%s with a message", orig.Name, c, tc.wantBlocked)
					}
					containsAll(t, orig.Name+" OwnerRemediated message", c.Message, tc.wantMessage)
				} else if c != nil && c.Reason != clusterv1.MachineOwnerRemediatedWaitingForRemediationReason {
					t.Errorf("%s OwnerRemediated = %+v, want it untouched", orig.Name, c)
				}
			}
		})
	}
}

// TestRemediationReplacement follows a remediation through the phases: the unhealthy Machine
// is deleted, its member leaves, and the next scale-up creates the replacement, which carries
// the remediation data, and the in-progress record is cleared.
func TestRemediationReplacement(t *testing.T) {
	ctx := testContext(t)
	waiting := clusterv1.MachineDeletingWaitingForPreTerminateHookReason
	f := newFixture(t)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour, unhealthy())
	f.machine("m3", time.Hour)
	e := f.build()

	run := func() *scope { t.Helper(); return e.runRemediationPhases(ctx) }

	s := run()
	if got := e.deletedMachines(); !slices.Equal(got, []string{"m2"}) {
		t.Fatalf("deleted %v, want [m2]", got)
	}
	recorded := f.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]
	if recorded == "" || len(e.newMachines()) != 0 {
		t.Fatalf("after the first pass: in progress %q, %d new Machines", recorded, len(e.newMachines()))
	}
	updateStatus(ctx, s)
	if c := conditions.Get(f.kcp, controlplanev1.RemediatingCondition); c == nil || c.Status != metav1.ConditionTrue || c.Reason != controlplanev1.RemediatingReason {
		t.Errorf("Remediating = %+v", c)
	}

	// While m2 drains, nothing else happens.
	s = run()
	if !strings.Contains(s.waitMessage, "to be drained") || len(e.newMachines()) != 0 {
		t.Fatalf("second pass: %q, %d new Machines", s.waitMessage, len(e.newMachines()))
	}
	// Drained: its member leaves, then it goes.
	m2 := e.getMachine("m2")
	withCondition(clusterv1.MachineDeletingCondition, metav1.ConditionTrue, waiting)(m2)
	if err := e.c.Status().Update(ctx, m2); err != nil {
		t.Fatal(err)
	}
	s = run()
	if !strings.Contains(s.waitMessage, "waiting for the etcd member m2 of Machine m2 to leave") {
		t.Fatalf("third pass: %q", s.waitMessage)
	}
	if leave, _, _ := unstructured.NestedBool(e.getK0sMember("m2").Object, "spec", "leave"); !leave {
		t.Fatal("m2's EtcdMember was not asked to leave")
	}
	f.etcd.removeByName("m2") // k0s honours the leave
	run()
	m2 = e.getMachine("m2")
	if hasHook(m2) {
		t.Fatal("hook kept after the member left")
	}
	m2.Finalizers = nil
	if err := e.c.Update(ctx, m2); err != nil {
		t.Fatal(err)
	}

	s = run()
	created := e.newMachines()
	if len(created) != 1 {
		t.Fatalf("created %d replacements, want 1 (%s)", len(created), s.waitMessage)
	}
	if got := created[0].Annotations[controlplanev1.RemediationForAnnotation]; got != recorded {
		t.Errorf("replacement remediation-for = %q, want %q", got, recorded)
	}
	if _, ok := f.kcp.Annotations[controlplanev1.RemediationInProgressAnnotation]; ok {
		t.Error("in-progress annotation kept after the replacement was created")
	}
	if !hasHook(&created[0]) {
		t.Error("replacement has no pre-terminate hook")
	}
	updateStatus(ctx, s)
	if c := conditions.Get(f.kcp, controlplanev1.RemediatingCondition); c == nil || c.Status != metav1.ConditionTrue {
		// The pass that created the replacement still reported the remediation it completed.
		t.Errorf("Remediating = %+v", c)
	}
	s = e.scope(ctx)
	if _, err := e.r.reconcileRemediation(ctx, s); err != nil {
		t.Fatal(err)
	}
	updateStatus(ctx, s)
	if c := conditions.Get(f.kcp, controlplanev1.RemediatingCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != controlplanev1.NotRemediatingReason {
		t.Errorf("Remediating after the replacement = %+v", c)
	}
}

// firstUnhealthy names the Machine a blocked remediation is about: the most broken one, which
// the test cases make the first unhealthy Machine they add unless a member is down, or the
// lost last Machine, whose infrastructure is deleted.
func firstUnhealthy(f *fixture) string {
	for _, m := range f.machines {
		if conditions.IsFalse(m, clusterv1.MachineHealthCheckSucceededCondition) || infrastructureDeleted(m) {
			return m.Name
		}
	}
	return ""
}

func TestParseRemediationData(t *testing.T) {
	d, err := parseRemediationData(`{"machine":"m1","timestamp":"2025-03-04T05:06:07Z","retryCount":2}`)
	if err != nil || d.Machine != "m1" || d.RetryCount != 2 || d.Timestamp.UTC().Format(time.RFC3339) != "2025-03-04T05:06:07Z" {
		t.Errorf("parse = %+v, %v", d, err)
	}
	if _, err := parseRemediationData(""); err == nil {
		t.Error("empty data parsed")
	}
}

// Two Machines of three fail their health check (their kubelets stop, their etcd members keep
// working). The control plane replaces them one after the other without help: the first
// remediation's replacement joins under the relaxed preflight, then the second is remediated.
// Before, the in-progress record blocked the second remediation and the strict preflight
// blocked the replacement: stuck at two Machines.
func TestTwoUnhealthyMachinesRecover(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.Finalizers = []string{Finalizer}
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour, unhealthy(), notReady())
	f.machine("m3", time.Hour, unhealthy(), notReady())
	e := f.build()
	most := 0
	for pass := 0; pass < 40; pass++ {
		s := e.scope(ctx)
		if _, err := e.r.reconcileNormal(ctx, s); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		most = max(most, len(e.listMachines()))
		if up := upVoters(f.etcd); up < 2 {
			t.Fatalf("pass %d: only %d etcd members up: quorum lost", pass, up)
		}
		e.world(ctx)
		healthy := 0
		for _, m := range e.listMachines() {
			if m.DeletionTimestamp.IsZero() && !conditions.IsFalse(&m, clusterv1.MachineHealthCheckSucceededCondition) {
				healthy++
			}
		}
		if healthy == 3 && len(e.listMachines()) == 3 {
			if names := f.etcd.names(); len(names) != 3 {
				t.Fatalf("3 healthy Machines but etcd members %v", names)
			}
			if most > 4 {
				t.Errorf("up to %d Machines at once, want at most 4 (maxSurge 1)", most)
			}
			return
		}
	}
	t.Fatalf("not recovered after 40 passes: Machines %v, etcd %v, KCP annotations %v", e.listMachineNames(), f.etcd.names(), e.getKCP().Annotations)
}

// TestRemediationEndsWithoutAScaleUp: a remediation of a control plane above its replica count
// (5 Machines for 3 replicas) is followed by a scale-down, not a scale-up. The remediation
// still ends: a Machine that fails its health check later is remediated too.
func TestRemediationEndsWithoutAScaleUp(t *testing.T) {
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
		for _, p := range []phases.Phase[*scope]{e.r.reconcileRemediation, e.r.reconcileReplicas} {
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

// TestRemediationNotRecordedWhenDeleteFails: when deleting the unhealthy Machine fails,
// Reconcile returns the error and stores neither the in-progress annotation nor
// lastRemediation, so the control plane does not wait for the replacement of a Machine that
// still exists.
func TestRemediationNotRecordedWhenDeleteFails(t *testing.T) {
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

func upVoters(f *fakeEtcd) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.members {
		if !m.learner && m.state == memberUp {
			n++
		}
	}
	return n
}

// testSnapshots are etcd snapshot settings.
func testSnapshots() *bootstrapv1.EtcdSnapshots {
	return &bootstrapv1.EtcdSnapshots{S3: bootstrapv1.EtcdSnapshotS3{
		Endpoint: "s3.example.com", Bucket: "site-backups",
		CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
	}}
}

// The only Machine of a control plane with etcd snapshots, unhealthy: it is deleted, its
// replacement is created only once it is gone (two nodes would otherwise serve the endpoint with
// diverging data), and the replacement's KairosConfig restores the newest snapshot. The
// replacement is up to date: restoring is how it started, no reason to roll it.
func TestLastMachineReplacedByARestore(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.replicas(1)
	f.kcp.Spec.Etcd.Snapshots = testSnapshots()
	f.machine("m1", time.Hour, unhealthy())
	e := f.build()

	run := func() *scope { t.Helper(); return e.runRemediationPhases(ctx) }

	run()
	if got := e.deletedMachines(); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("deleted %v, want [m1]", got)
	}
	// Drained: the last Machine's hook goes without a member leaving (there is no etcd to keep).
	m1 := e.getMachine("m1")
	withCondition(clusterv1.MachineDeletingCondition, metav1.ConditionTrue, clusterv1.MachineDeletingWaitingForPreTerminateHookReason)(m1)
	if err := e.c.Status().Update(ctx, m1); err != nil {
		t.Fatal(err)
	}
	run()
	if m1 = e.getMachine("m1"); hasHook(m1) {
		t.Fatal("the last Machine's pre-terminate hook was kept")
	}
	s := run()
	if len(e.newMachines()) != 0 || s.waitMessage != "waiting for Machine m1 to be deleted" {
		t.Fatalf("while m1 is deleting: %d new Machines, %q", len(e.newMachines()), s.waitMessage)
	}
	m1.Finalizers = nil
	if err := e.c.Update(ctx, m1); err != nil {
		t.Fatal(err)
	}

	s = run()
	created := e.newMachines()
	if len(created) != 1 {
		t.Fatalf("created %d replacements, want 1 (%s)", len(created), s.waitMessage)
	}
	config := e.getConfig(created[0].Name)
	if config.Spec.EtcdSnapshots == nil || config.Spec.EtcdSnapshots.Restore != bootstrapv1.EtcdSnapshotRestoreNewest {
		t.Fatalf("the replacement's KairosConfig does not restore: %+v", config.Spec.EtcdSnapshots)
	}
	s = e.scope(ctx)
	if ok, why := s.upToDate(e.getMachine(created[0].Name)); !ok {
		t.Errorf("the restoring replacement is outdated: %v", why)
	}
}

// Without etcd snapshots the only Machine is not remediated, and a control plane that lost every
// Machine creates one that joins, as before: nothing restores.
func TestNoRestoreWithoutSnapshots(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.replicas(1)
	e := f.build()
	s := e.scope(ctx)
	if s.restoresFromSnapshot() {
		t.Fatal("a control plane without snapshots restores")
	}
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	created := e.newMachines()
	if len(created) != 1 {
		t.Fatalf("created %d Machines (%s)", len(created), s.waitMessage)
	}
	if c := e.getConfig(created[0].Name); c.Spec.EtcdSnapshots != nil {
		t.Errorf("the new Machine's KairosConfig has etcd snapshots: %+v", c.Spec.EtcdSnapshots)
	}
}

// runRemediationPhases runs the phases a remediation goes through, as Reconcile does: the
// pre-terminate hooks, remediation and replicas, until one halts.
func (e *env) runRemediationPhases(ctx context.Context) *scope {
	e.t.Helper()
	s := e.scope(ctx)
	for _, p := range []phases.Phase[*scope]{e.r.reconcilePreTerminateHooks, e.r.reconcileRemediation, e.r.reconcileReplicas} {
		if _, err := p(ctx, s); err != nil {
			e.t.Fatal(err)
		}
		if s.halted {
			break
		}
	}
	return s
}
