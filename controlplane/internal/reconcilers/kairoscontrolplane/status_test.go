package kairoscontrolplane

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// assertCondition checks a control-plane condition; message is a substring ("" for any).
func assertCondition(t *testing.T, kcp *controlplanev1.KairosControlPlane, typ string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	c := conditions.Get(kcp, typ)
	if c == nil {
		t.Errorf("condition %s not set", typ)
		return
	}
	if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, message) {
		t.Errorf("condition %s = %s/%s %q, want %s/%s containing %q", typ, c.Status, c.Reason, c.Message, status, reason, message)
	}
}

// statusScope builds a scope for updateStatus from the fixture.
func statusScope(t *testing.T, f *fixture) *scope {
	t.Helper()
	return f.build().scope(testContext(t))
}

// conditionCase is one row of a condition setter's table: the fixture the scope is built from
// (as Reconcile builds it), what the phases observed, and the condition the setter must set.
type conditionCase struct {
	name string
	// setup shapes the fixture; without it, an initialized control plane of 3 replicas has no
	// Machines.
	setup func(f *fixture)
	// observe fills what the phases would have observed.
	observe func(s *scope)
	// want is the condition, its type aside; want.Message is the whole message, or with
	// partial a part of it.
	want    metav1.Condition
	partial bool
}

// testConditionSetter builds each case's scope, calls set on it and checks that it set its
// condition, and no other, as the case wants.
func testConditionSetter(t *testing.T, typ string, set func(context.Context, *scope), cases []conditionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			s := statusScope(t, f)
			if tc.observe != nil {
				tc.observe(s)
			}
			set(ctx, s)
			c := conditions.Get(f.kcp, typ)
			if c == nil {
				t.Fatalf("%s not set", typ)
			}
			if c.Status != tc.want.Status || c.Reason != tc.want.Reason {
				t.Errorf("%s = %s/%s %q, want %s/%s", typ, c.Status, c.Reason, c.Message, tc.want.Status, tc.want.Reason)
			}
			if tc.partial && !strings.Contains(c.Message, tc.want.Message) {
				t.Errorf("%s message = %q, want it to contain %q", typ, c.Message, tc.want.Message)
			}
			if !tc.partial && c.Message != tc.want.Message {
				t.Errorf("%s message = %q, want %q", typ, c.Message, tc.want.Message)
			}
			if n := len(f.kcp.Status.Conditions); n != 1 {
				t.Errorf("%d conditions set, want only %s: %+v", n, typ, f.kcp.Status.Conditions)
			}
		})
	}
}

// withoutContext adapts a setter that needs no context to testConditionSetter.
func withoutContext(set func(*scope)) func(context.Context, *scope) {
	return func(_ context.Context, s *scope) { set(s) }
}

// settled is a settled control plane: three ready, available, up-to-date Machines, each with a
// healthy etcd member.
func settled(f *fixture) {
	f.machine("m1", 3*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
	f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
	f.machine("m3", time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
}

// deletingControlPlane marks the control plane deleted, with two Machines left.
func deletingControlPlane(f *fixture) {
	f.machine("m1", time.Hour)
	f.machine("m2", time.Hour)
	f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
	f.kcp.Finalizers = []string{Finalizer}
}

// rollingOutBlockedByPreflight: the spec moved to v1.32.0, the first Machine at v1.32.0 is not
// ready, and preflight stops the rollout there.
func rollingOutBlockedByPreflight(f *fixture) {
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	f.kcp.Spec.Version = "v1.32.0"
	f.machine("m4", time.Minute, notReady())
}

func haltedByPreflight(s *scope) {
	s.preflightMessages = []string{"Machine m4 is not ready"}
	s.wait("preflight checks failed: Machine m4 is not ready")
}

func TestSetReplicas(t *testing.T) {
	const wantSelector = "cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/control-plane,cluster.x-k8s.io/control-plane-name=demo-cp"
	for _, tc := range []struct {
		name                                 string
		setup                                func(f *fixture)
		replicas, ready, available, upToDate int32
		versions                             []clusterv1.StatusVersion
		version                              string
	}{
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() }},
		{name: "settled control plane",
			setup:    settled,
			replicas: 3, ready: 3, available: 3, upToDate: 3,
			versions: []clusterv1.StatusVersion{{Version: testVersion, Replicas: 3}}, version: testVersion},
		{name: "Machines in every state: versions in semantic order, oldest first",
			setup: func(f *fixture) {
				f.machine("m1", 5*time.Hour, withVersion("v1.30.10"))
				f.machine("m2", 4*time.Hour, withVersion("v1.9.0"), notAvailable())
				f.machine("m3", 3*time.Hour, notReady())
				f.machine("m4", 2*time.Hour)
				f.machine("m5", time.Hour, deleting(time.Minute, ""), withVersion("v1.30.10"))
				f.machine("m6", time.Hour, withVersion(""), withoutNode(), notReady())
			},
			// m3 and m4 are at the spec's version; m1, m2, m5 and m6 are not.
			replicas: 6, ready: 4, available: 3, upToDate: 2,
			versions: []clusterv1.StatusVersion{{Version: "v1.9.0", Replicas: 1}, {Version: "v1.30.10", Replicas: 2}, {Version: testVersion, Replicas: 2}},
			version:  "v1.9.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			s := statusScope(t, f)
			setReplicas(s)
			st := f.kcp.Status
			check := func(name string, got *int32, want int32) {
				t.Helper()
				if got == nil || *got != want {
					t.Errorf("%s = %v, want %d", name, ptr.Deref(got, -1), want)
				}
			}
			check("replicas", st.Replicas, tc.replicas)
			check("readyReplicas", st.ReadyReplicas, tc.ready)
			check("availableReplicas", st.AvailableReplicas, tc.available)
			check("upToDateReplicas", st.UpToDateReplicas, tc.upToDate)
			if !reflect.DeepEqual(st.Versions, tc.versions) {
				t.Errorf("versions = %+v, want %+v", st.Versions, tc.versions)
			}
			if st.Version != tc.version {
				t.Errorf("deprecated version = %q, want the oldest, %q", st.Version, tc.version)
			}

			if st.Selector != wantSelector {
				t.Errorf("selector = %q, want %q", st.Selector, wantSelector)
			}
			sel, err := labels.Parse(st.Selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range f.machines {
				if !sel.Matches(labels.Set(m.Labels)) {
					t.Errorf("selector does not match Machine %s", m.Name)
				}
			}
			if sel.Matches(labels.Set{clusterv1.ClusterNameLabel: clusterName, controlplanev1.ControlPlaneNameLabel: kcpName}) {
				t.Error("selector matches a Machine without the control-plane label")
			}
			if len(st.Conditions) != 0 {
				t.Errorf("setReplicas set conditions: %+v", st.Conditions)
			}
		})
	}
}

func TestSetInitializedCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.InitializedCondition, withoutContext(setInitializedCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.InitializedReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotInitializedReason,
				Message: "waiting for the first control-plane node to serve the API"}},
		{name: "not initialized, with an available Machine",
			setup: func(f *fixture) {
				f.notInitialized().replicas(1)
				f.machine("m1", time.Hour)
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotInitializedReason,
				Message: "waiting for the first control-plane node to serve the API"}},
	})
}

func TestSetCertificatesAvailableCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.CertificatesAvailableCondition, withoutContext(setCertificatesAvailableCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.CertificatesAvailableReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.CertificatesAvailableReason}},
		{name: "certificates failed: the error goes to the log only",
			observe: func(s *scope) { s.certificatesErr = errors.New("reading Secret team-a/demo-ca: boom") },
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.CertificatesInternalErrorReason,
				Message: "cannot create or read the cluster certificates; see the controller logs"}},
	})
}

func TestSetMachinesReadyCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.MachinesReadyCondition, setMachinesReadyCondition, []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ReadyReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.NoReplicasReason}},
		{name: "a Machine not ready",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, notAvailable())
				f.machine("m3", time.Hour, notReady())
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotReadyReason, Message: "Machine m3"}, partial: true},
		{name: "a Machine's Ready unknown",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, withCondition(clusterv1.MachineReadyCondition, metav1.ConditionUnknown, "Unknown"))
			},
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.ReadyUnknownReason, Message: "Machine m1"}, partial: true},
	})
}

func TestSetMachinesUpToDateCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.MachinesUpToDateCondition, setMachinesUpToDateCondition, []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.UpToDateReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.NoReplicasReason}},
		{name: "Machines' UpToDate conditions aggregated",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
				f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionFalse, clusterv1.MachineNotUpToDateReason))
				f.machine("m3", time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotUpToDateReason, Message: "Machine m2"}, partial: true},
		{name: "Machines' UpToDate conditions not set yet",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			want:  metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.UpToDateUnknownReason, Message: "Machine m1: Condition UpToDate not yet reported"}, partial: true},
	})
}

func TestSetRollingOutCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.RollingOutCondition, withoutContext(setRollingOutCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotRollingOutReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotRollingOutReason}},
		{name: "rolling out, blocked by preflight: outdated Machines oldest first, then what blocks",
			setup: rollingOutBlockedByPreflight, observe: haltedByPreflight,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.RollingOutReason,
				Message: "* Machine m1: version v1.31.2, want v1.32.0\n* Machine m2: version v1.31.2, want v1.32.0\n* Machine m3: version v1.31.2, want v1.32.0\n* Machine m4 is not ready"}},
		{name: "one outdated Machine: one line, its reasons joined",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.kcp.Spec.Version = "v1.32.0"
				f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "cp-large"
				f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo bye"}
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.RollingOutReason,
				Message: "Machine m1: version v1.31.2, want v1.32.0, infrastructure template cp-small, want cp-large, KairosConfig spec changed"}},
		{name: "a deleting outdated Machine is no rollout",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, deleting(time.Minute, ""))
				f.kcp.Spec.Version = "v1.32.0"
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.machine("m4", time.Minute)
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotRollingOutReason}},
	})
}

func TestSetScalingUpCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.ScalingUpCondition, withoutContext(setScalingUpCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingUpReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingUpReason,
				Message: "scaling up from 0 to 3 replicas"}},
		{name: "rolling out, blocked by preflight: one Machine too many, no scale-up",
			setup: rollingOutBlockedByPreflight, observe: haltedByPreflight,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingUpReason}},
		{name: "scaling up, blocked by a missing infrastructure template",
			setup:   func(f *fixture) { f.machine("m1", time.Hour) },
			observe: func(s *scope) { s.infraTemplateErr = "TestMachineTemplate y does not exist" },
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingUpReason,
				Message: "* scaling up from 1 to 3 replicas\n* TestMachineTemplate y does not exist"}},
		{name: "every blocker, each once, what the phases wait for first",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			observe: func(s *scope) {
				s.wait("KairosConfigTemplate t does not exist")
				s.configTemplateErr = "KairosConfigTemplate t does not exist"
				s.infraTemplateErr = "TestMachineTemplate y does not exist"
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingUpReason,
				Message: "* scaling up from 1 to 3 replicas\n* KairosConfigTemplate t does not exist\n* TestMachineTemplate y does not exist"}},
		{name: "deleting Machines do not count as active for scaling",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingUpReason,
				Message: "scaling up from 2 to 3 replicas"}},
		{name: "a control plane being deleted does not scale up, though its Machines go",
			setup: func(f *fixture) {
				deletingControlPlane(f)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingUpReason}},
	})
}

func TestSetScalingDownCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.ScalingDownCondition, withoutContext(setScalingDownCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingDownReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingDownReason}},
		{name: "rolling out, blocked by preflight: one Machine too many",
			setup: rollingOutBlockedByPreflight, observe: haltedByPreflight,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingDownReason,
				Message: "* scaling down from 4 to 3 replicas\n* preflight checks failed: Machine m4 is not ready"}},
		{name: "scaling down, blocked by preflight",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
			},
			observe: func(s *scope) { s.wait("preflight checks failed: removing Machine m1 would lose etcd quorum") },
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingDownReason,
				Message: "* scaling down from 2 to 1 replicas\n* preflight checks failed: removing Machine m1 would lose etcd quorum"}},
		{name: "scaling down, nothing in the way",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingDownReason,
				Message: "scaling down from 2 to 1 replicas"}},
		{name: "deleting Machines do not count as active for scaling",
			setup: func(f *fixture) {
				settled(f)
				f.machine("m4", time.Minute, deleting(time.Minute, ""))
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotScalingDownReason}},
		{name: "a control plane being deleted scales down to none",
			setup: deletingControlPlane,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.ScalingDownReason,
				Message: "scaling down from 2 to 0 replicas"}},
	})
}

func TestSetRemediatingCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.RemediatingCondition, withoutContext(setRemediatingCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotRemediatingReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotRemediatingReason}},
		{name: "remediating",
			setup:   settled,
			observe: func(s *scope) { s.remediation(controlplanev1.RemediatingReason, "deleting unhealthy Machine %s", "m2") },
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.RemediatingReason,
				Message: "deleting unhealthy Machine m2"}},
		{name: "remediation blocked",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			observe: func(s *scope) {
				s.remediationReason = controlplanev1.RemediationBlockedQuorumReason
				s.remediationMessages = []string{"first", "second"}
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.RemediationBlockedQuorumReason,
				Message: "* first\n* second"}},
	})
}

func TestSetDeletingCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.DeletingCondition, withoutContext(setDeletingCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotDeletingReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want:  metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotDeletingReason}},
		{name: "deleting",
			setup: deletingControlPlane,
			observe: func(s *scope) {
				s.deletingReason = controlplanev1.DeletingWaitingForMachinesReason
				s.deletingMessage = "deleting control-plane Machine(s) m1, m2"
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.DeletingWaitingForMachinesReason,
				Message: "deleting control-plane Machine(s) m1, m2"}},
		{name: "deleting, failed before saying what it waits for: a reason all the same",
			setup: deletingControlPlane,
			want:  metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.DeletingReason}},
	})
}

func TestSetEtcdClusterHealthyCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.EtcdClusterHealthyCondition, withoutContext(setEtcdClusterHealthyCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdClusterHealthyReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.EtcdClusterHealthUnknownReason,
				Message: "Waiting for the control plane to be initialized"}},
		{name: "deleting: etcd is not asked",
			setup: deletingControlPlane,
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.EtcdClusterHealthUnknownReason,
				Message: "The control plane is being deleted"}},
		{name: "Machines not ready, etcd healthy",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, notAvailable())
				f.machine("m3", time.Hour, notReady())
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdClusterHealthyReason}},
		{name: "one etcd member of three down",
			setup: func(f *fixture) {
				settled(f)
				f.member("m3").state = memberDown
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdClusterNotHealthyReason,
				Message: "Machine m3: etcd member m3 does not answer at 10.0.0.12:2379: rpc error: code = Unavailable desc = connection refused"}},
		{name: "two etcd members of five down: one line each, oldest Machine first",
			setup: func(f *fixture) {
				f.replicas(5)
				for i, n := range []string{"m1", "m2", "m3", "m4", "m5"} {
					f.machine(n, time.Duration(5-i)*time.Hour)
				}
				f.member("m5").state = memberDown
				f.member("m4").state = memberDown
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdClusterNotHealthyReason,
				Message: "* Machine m4: etcd member m4 does not answer at 10.0.0.13:2379: rpc error: code = Unavailable desc = connection refused\n" +
					"* Machine m5: etcd member m5 does not answer at 10.0.0.14:2379: rpc error: code = Unavailable desc = connection refused"}},
		{name: "three of five members down: quorum lost",
			setup: func(f *fixture) {
				f.replicas(5)
				for _, n := range []string{"m1", "m2", "m3", "m4", "m5"} {
					f.machine(n, time.Hour)
				}
				for _, n := range []string{"m3", "m4", "m5"} {
					f.member(n).state = memberDown
				}
			},
			want: metav1.Condition{Status: metav1.ConditionUnknown, Reason: controlplanev1.EtcdClusterHealthUnknownReason,
				Message: "No control-plane node answered a quorum read of etcd's member list: "}, partial: true},
		{name: "a learner",
			setup: func(f *fixture) {
				settled(f)
				f.member("m3").learner = true
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdClusterNotHealthyReason,
				Message: "Machine m3: etcd member m3 is a learner, not yet promoted to a voting member"}},
		{name: "an etcd member without a Machine",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdClusterNotHealthyReason,
				Message: "etcd member stray (peer 10.0.9.9) belongs to no control-plane Machine"}},
		{name: "a deleting Machine's member is no problem",
			setup: func(f *fixture) {
				settled(f)
				f.machine("m4", time.Minute, deleting(time.Minute, ""))
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdClusterHealthyReason}},
		{name: "a Machine whose node has not joined yet is no problem",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Minute, withoutNode())
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.EtcdClusterHealthyReason}},
		{name: "what the member cleanup could not do, once",
			setup: settled,
			observe: func(s *scope) {
				s.etcdLeaveMessages = []string{"cannot remove etcd member x: timeout", "cannot remove etcd member x: timeout"}
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.EtcdClusterNotHealthyReason,
				Message: "cannot remove etcd member x: timeout"}},
	})
}

func TestSetAvailableCondition(t *testing.T) {
	testConditionSetter(t, controlplanev1.AvailableCondition, withoutContext(setAvailableCondition), []conditionCase{
		{name: "settled control plane", setup: settled,
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "no Machines, not initialized",
			setup: func(f *fixture) { f.notInitialized() },
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "Waiting for the first control-plane node to serve the API"}},
		{name: "quorum: 2 of 3 available",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour, notAvailable())
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "Machines not ready, etcd healthy: available (the API and etcd are what count)",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, notAvailable())
				f.machine("m3", time.Hour, notReady())
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "1 -> 3 scale-up: one Machine is enough to be available",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			want:  metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "single node available",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "one etcd member of three down: still available",
			setup: func(f *fixture) {
				settled(f)
				f.member("m3").state = memberDown
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "a learner counts for nothing: 2 healthy voters of 2 keep quorum",
			setup: func(f *fixture) {
				settled(f)
				f.member("m3").learner = true
			},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: controlplanev1.AvailableReason}},
		{name: "three of five members down: quorum lost, not available although every Machine is ready",
			setup: func(f *fixture) {
				f.replicas(5)
				for _, n := range []string{"m1", "m2", "m3", "m4", "m5"} {
					f.machine(n, time.Hour)
				}
				for _, n := range []string{"m3", "m4", "m5"} {
					f.member(n).state = memberDown
				}
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "etcd has no quorum: no control-plane node answered a quorum read ("}, partial: true},
		{name: "a member joins: no quorum until it runs, naming it",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Minute, withoutNode())
				f.etcd.add("m2", address(1)).state = memberNotStarted
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "etcd has no quorum while the member at https://10.0.0.11:2380 joins"}},
		{name: "etcd not observed yet",
			setup:   settled,
			observe: func(s *scope) { s.etcd = nil },
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "etcd's health is not known yet"}},
		{name: "the workload API does not answer: not available",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.apiDown = true
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "The workload cluster's API server does not answer Cluster API's health probes"}},
		{name: "the workload API does not answer and quorum is lost: both said",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
				f.member("m1").state = memberDown
				f.apiDown = true
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "* The workload cluster's API server does not answer Cluster API's health probes\n" +
					"* etcd has no quorum: no control-plane node answered a quorum read (10.0.0.10:2379: reading the member list: rpc error: code = Unavailable desc = connection refused)"}},
		{name: "not initialized: not available even with available Machines",
			setup: func(f *fixture) {
				f.notInitialized().replicas(1)
				f.machine("m1", time.Hour)
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "Waiting for the first control-plane node to serve the API"}},
		{name: "deleting",
			setup: deletingControlPlane,
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "* etcd's health is not known yet\n* The control plane is being deleted"}},
		{name: "deleting before initialized",
			setup: func(f *fixture) {
				f.notInitialized()
				deletingControlPlane(f)
			},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: controlplanev1.NotAvailableReason,
				Message: "* Waiting for the first control-plane node to serve the API\n* The control plane is being deleted"}},
	})
}

// TestUpdateStatusConditions: updateStatus calls every setter (the setters' tables check what
// each sets), and ownedConditions, the conditions the patch helper writes over a concurrent
// change, lists exactly the conditions it sets, and Paused, which Reconcile sets.
func TestUpdateStatusConditions(t *testing.T) {
	owned := slices.DeleteFunc(slices.Clone(ownedConditions), func(c string) bool { return c == clusterv1.PausedCondition })
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		// notSet are the owned conditions left as they were.
		notSet []string
	}{
		{name: "settled control plane", setup: settled},
		{name: "no Machines, not initialized", setup: func(f *fixture) { f.notInitialized() }},
		{name: "deleting: BootstrapProviderCompatible is not evaluated", setup: deletingControlPlane,
			notSet: []string{controlplanev1.BootstrapProviderCompatibleCondition}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			s := statusScope(t, f)
			updateStatus(ctx, s)
			var set []string
			for _, c := range f.kcp.Status.Conditions {
				set = append(set, c.Type)
			}
			want := slices.DeleteFunc(slices.Clone(owned), func(c string) bool { return slices.Contains(tc.notSet, c) })
			slices.Sort(set)
			slices.Sort(want)
			if !slices.Equal(set, want) {
				t.Errorf("updateStatus set %v, want the owned conditions but Paused %v", set, want)
			}
			if f.kcp.Status.Replicas == nil || f.kcp.Status.Selector == "" {
				t.Errorf("replicas = %v, selector %q: setReplicas not called", f.kcp.Status.Replicas, f.kcp.Status.Selector)
			}
		})
	}
}

// TestScalingUpNamesAMissingConfigTemplateOnce: with a missing KairosConfigTemplate, the
// ScalingUp condition's message says so once.
func TestScalingUpNamesAMissingConfigTemplateOnce(t *testing.T) {
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

func TestVersionsUnparsable(t *testing.T) {
	f := newFixture(t)
	f.machine("a", time.Hour, withVersion("latest"))
	f.machine("b", time.Hour, withVersion("v1.30.0"))
	s := statusScope(t, f)
	got, oldest := versions(s.machines)
	if len(got) != 2 || oldest != got[0].Version {
		t.Errorf("versions = %+v, oldest %q", got, oldest)
	}
}

// A k0s controller joins etcd as a voting member: between the member add and the new member's
// start etcd has no quorum. Available says so (the API cannot write then), naming the joining
// member, and the control plane looks again within a second.
func TestAvailableWhileAMemberJoins(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	f.machine("m2", time.Minute, withoutNode())
	f.etcd.add("m2", address(1)).state = memberNotStarted
	e := f.build()
	s := e.scope(ctx)
	updateStatus(ctx, s)
	assertCondition(t, f.kcp, controlplanev1.AvailableCondition, metav1.ConditionFalse, controlplanev1.NotAvailableReason,
		"etcd has no quorum while the member at https://10.0.0.11:2380 joins")
	res, err := e.r.reconcileNormal(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != joiningRequeue {
		t.Errorf("RequeueAfter = %s, want %s while a member joins", res.RequeueAfter, joiningRequeue)
	}
}

func TestSetBootstrapProviderCompatibleCondition(t *testing.T) {
	compatible := &bootstrapProvider{apiVersion: "bootstrap.cluster.x-k8s.io/v1beta2", release: "v0.1.0",
		contractVersions: []string{"v1beta2"}, served: []string{"v1beta2"}, storage: "v1beta2"}
	for _, tc := range []struct {
		name                  string
		bootstrap             *bootstrapProvider
		refused               string
		wantSet               bool
		wantStatus            metav1.ConditionStatus
		wantReason, wantInMsg string
	}{
		{name: "not evaluated (deleting): left as it was", bootstrap: nil},
		{name: "compatible", bootstrap: compatible, wantSet: true, wantStatus: metav1.ConditionTrue, wantReason: controlplanev1.BootstrapProviderCompatibleReason,
			wantInMsg: "bootstrap provider v0.1.0: KairosConfig CRD for contract v1beta2 v1beta2, served v1beta2, storage v1beta2"},
		{name: "outside the policy", bootstrap: &bootstrapProvider{problem: "bootstrap provider v0.9.0 is outside the version-skew policy"}, refused: "ignored",
			wantSet: true, wantStatus: metav1.ConditionFalse, wantReason: controlplanev1.BootstrapProviderNotCompatibleReason, wantInMsg: "outside the version-skew policy"},
		{name: "a KairosConfig was refused", bootstrap: compatible, refused: "the installed bootstrap provider v0.1.0 refused the KairosConfig",
			wantSet: true, wantStatus: metav1.ConditionFalse, wantReason: controlplanev1.KairosConfigRefusedReason, wantInMsg: "refused the KairosConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{kcp: &controlplanev1.KairosControlPlane{}, bootstrap: tc.bootstrap, configRefused: tc.refused}
			setBootstrapProviderCompatibleCondition(s)
			if !tc.wantSet {
				if c := conditions.Get(s.kcp, controlplanev1.BootstrapProviderCompatibleCondition); c != nil {
					t.Errorf("condition set: %+v", c)
				}
				return
			}
			assertCondition(t, s.kcp, controlplanev1.BootstrapProviderCompatibleCondition, tc.wantStatus, tc.wantReason, tc.wantInMsg)
		})
	}
}
