package kairoscontrolplane

import (
	"errors"
	"reflect"
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

func TestUpdateStatusCounters(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", 5*time.Hour, withVersion("v1.30.10"))
	f.machine("m2", 4*time.Hour, withVersion("v1.9.0"), notAvailable())
	f.machine("m3", 3*time.Hour, notReady())
	f.machine("m4", 2*time.Hour)
	f.machine("m5", time.Hour, deleting(time.Minute, ""), withVersion("v1.30.10"))
	f.machine("m6", time.Hour, withVersion(""), withoutNode(), notReady())
	s := statusScope(t, f)
	updateStatus(ctx, s)
	st := f.kcp.Status

	check := func(name string, got *int32, want int32) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %d", name, ptr.Deref(got, -1), want)
		}
	}
	check("replicas", st.Replicas, 6)
	check("readyReplicas", st.ReadyReplicas, 4)
	check("availableReplicas", st.AvailableReplicas, 3)
	// m3 and m4 are at the spec's version; m1, m2, m5 and m6 are not.
	check("upToDateReplicas", st.UpToDateReplicas, 2)

	wantVersions := []clusterv1.StatusVersion{{Version: "v1.9.0", Replicas: 1}, {Version: "v1.30.10", Replicas: 2}, {Version: testVersion, Replicas: 2}}
	if !reflect.DeepEqual(st.Versions, wantVersions) {
		t.Errorf("versions = %+v, want %+v (semantic order, oldest first)", st.Versions, wantVersions)
	}
	if st.Version != "v1.9.0" {
		t.Errorf("deprecated version = %q, want the oldest, v1.9.0", st.Version)
	}

	const wantSelector = "cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/control-plane,cluster.x-k8s.io/control-plane-name=demo-cp"
	if st.Selector != wantSelector {
		t.Errorf("selector = %q, want %q", st.Selector, wantSelector)
	}
	sel, err := labels.Parse(st.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(f.machines[0].Labels)) {
		t.Error("selector does not match the Machines")
	}
	if sel.Matches(labels.Set{clusterv1.ClusterNameLabel: clusterName, controlplanev1.ControlPlaneNameLabel: kcpName}) {
		t.Error("selector matches a Machine without the control-plane label")
	}
}

func TestUpdateStatusNoMachines(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	s := statusScope(t, f)
	updateStatus(ctx, s)
	st := f.kcp.Status
	if ptr.Deref(st.Replicas, -1) != 0 || ptr.Deref(st.ReadyReplicas, -1) != 0 || ptr.Deref(st.UpToDateReplicas, -1) != 0 || ptr.Deref(st.AvailableReplicas, -1) != 0 {
		t.Errorf("counters = %+v", st)
	}
	if st.Versions != nil || st.Version != "" {
		t.Errorf("versions = %+v / %q, want none", st.Versions, st.Version)
	}
	assertCondition(t, f.kcp, controlplanev1.MachinesReadyCondition, metav1.ConditionTrue, controlplanev1.NoReplicasReason, "")
	assertCondition(t, f.kcp, controlplanev1.MachinesUpToDateCondition, metav1.ConditionTrue, controlplanev1.NoReplicasReason, "")
	assertCondition(t, f.kcp, controlplanev1.InitializedCondition, metav1.ConditionFalse, controlplanev1.NotInitializedReason, "waiting for the first control-plane node")
	assertCondition(t, f.kcp, controlplanev1.AvailableCondition, metav1.ConditionFalse, controlplanev1.NotAvailableReason, "Waiting for the first control-plane node to serve the API")
	assertCondition(t, f.kcp, controlplanev1.EtcdClusterHealthyCondition, metav1.ConditionUnknown, controlplanev1.EtcdClusterHealthUnknownReason, "Waiting for the control plane to be initialized")
	assertCondition(t, f.kcp, controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "scaling up from 0 to 3 replicas")
	assertCondition(t, f.kcp, controlplanev1.ScalingDownCondition, metav1.ConditionFalse, controlplanev1.NotScalingDownReason, "")
	assertCondition(t, f.kcp, controlplanev1.RollingOutCondition, metav1.ConditionFalse, controlplanev1.NotRollingOutReason, "")
	assertCondition(t, f.kcp, controlplanev1.CertificatesAvailableCondition, metav1.ConditionTrue, controlplanev1.CertificatesAvailableReason, "")
	assertCondition(t, f.kcp, controlplanev1.RemediatingCondition, metav1.ConditionFalse, controlplanev1.NotRemediatingReason, "")
	assertCondition(t, f.kcp, controlplanev1.DeletingCondition, metav1.ConditionFalse, controlplanev1.NotDeletingReason, "")
}

func TestUpdateStatusConditions(t *testing.T) {
	type want struct {
		status  metav1.ConditionStatus
		reason  string
		message string
	}
	cases := []struct {
		name  string
		setup func(f *fixture)
		// observe fills what the phases would have observed.
		observe func(s *scope)
		want    map[string]want
	}{
		{name: "settled control plane",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
				f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
				f.machine("m3", time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
			},
			want: map[string]want{
				controlplanev1.AvailableCondition:             {metav1.ConditionTrue, controlplanev1.AvailableReason, ""},
				controlplanev1.InitializedCondition:           {metav1.ConditionTrue, controlplanev1.InitializedReason, ""},
				controlplanev1.CertificatesAvailableCondition: {metav1.ConditionTrue, controlplanev1.CertificatesAvailableReason, ""},
				controlplanev1.MachinesReadyCondition:         {metav1.ConditionTrue, controlplanev1.ReadyReason, ""},
				controlplanev1.MachinesUpToDateCondition:      {metav1.ConditionTrue, controlplanev1.UpToDateReason, ""},
				controlplanev1.RollingOutCondition:            {metav1.ConditionFalse, controlplanev1.NotRollingOutReason, ""},
				controlplanev1.ScalingUpCondition:             {metav1.ConditionFalse, controlplanev1.NotScalingUpReason, ""},
				controlplanev1.ScalingDownCondition:           {metav1.ConditionFalse, controlplanev1.NotScalingDownReason, ""},
				controlplanev1.RemediatingCondition:           {metav1.ConditionFalse, controlplanev1.NotRemediatingReason, ""},
				controlplanev1.DeletingCondition:              {metav1.ConditionFalse, controlplanev1.NotDeletingReason, ""},
			}},
		{name: "quorum: 2 of 3 available",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour, notAvailable())
			},
			want: map[string]want{controlplanev1.AvailableCondition: {metav1.ConditionTrue, controlplanev1.AvailableReason, ""}}},
		{name: "Machines not ready, etcd healthy: available (the API and etcd are what count)",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour, notAvailable())
				f.machine("m3", time.Hour, notReady())
			},
			want: map[string]want{
				controlplanev1.AvailableCondition:          {metav1.ConditionTrue, controlplanev1.AvailableReason, ""},
				controlplanev1.MachinesReadyCondition:      {metav1.ConditionFalse, controlplanev1.NotReadyReason, "m3"},
				controlplanev1.EtcdClusterHealthyCondition: {metav1.ConditionTrue, controlplanev1.EtcdClusterHealthyReason, ""},
			}},
		{name: "1 -> 3 scale-up: one Machine is enough to be available",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
			},
			want: map[string]want{controlplanev1.AvailableCondition: {metav1.ConditionTrue, controlplanev1.AvailableReason, ""}}},
		{name: "one etcd member of three down: still available, etcd not healthy",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			want: map[string]want{
				controlplanev1.AvailableCondition:          {metav1.ConditionTrue, controlplanev1.AvailableReason, ""},
				controlplanev1.EtcdClusterHealthyCondition: {metav1.ConditionFalse, controlplanev1.EtcdClusterNotHealthyReason, "Machine m3: etcd member m3 does not answer at 10.0.0.12:2379"},
			}},
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
			want: map[string]want{
				controlplanev1.AvailableCondition:          {metav1.ConditionFalse, controlplanev1.NotAvailableReason, "etcd has no quorum: no control-plane node answered a quorum read"},
				controlplanev1.EtcdClusterHealthyCondition: {metav1.ConditionUnknown, controlplanev1.EtcdClusterHealthUnknownReason, "No control-plane node answered"},
			}},
		{name: "a learner counts for nothing: 2 healthy voters of 2 keep quorum",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").learner = true
			},
			want: map[string]want{
				controlplanev1.AvailableCondition:          {metav1.ConditionTrue, controlplanev1.AvailableReason, ""},
				controlplanev1.EtcdClusterHealthyCondition: {metav1.ConditionFalse, controlplanev1.EtcdClusterNotHealthyReason, "etcd member m3 is a learner"},
			}},
		{name: "the workload API does not answer: not available",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.apiDown = true
			},
			want: map[string]want{controlplanev1.AvailableCondition: {metav1.ConditionFalse, controlplanev1.NotAvailableReason, "The workload cluster's API server does not answer"}}},
		{name: "an etcd member without a Machine",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
			},
			want: map[string]want{controlplanev1.EtcdClusterHealthyCondition: {metav1.ConditionFalse, controlplanev1.EtcdClusterNotHealthyReason, "etcd member stray (peer 10.0.9.9) belongs to no control-plane Machine"}}},
		{name: "single node available",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
			},
			want: map[string]want{controlplanev1.AvailableCondition: {metav1.ConditionTrue, controlplanev1.AvailableReason, ""}}},
		{name: "not initialized: not available even with available Machines",
			setup: func(f *fixture) {
				f.notInitialized().replicas(1)
				f.machine("m1", time.Hour)
			},
			want: map[string]want{
				controlplanev1.AvailableCondition:   {metav1.ConditionFalse, controlplanev1.NotAvailableReason, ""},
				controlplanev1.InitializedCondition: {metav1.ConditionFalse, controlplanev1.NotInitializedReason, ""},
			}},
		{name: "Machines' UpToDate conditions aggregated",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
				f.machine("m2", 2*time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionFalse, clusterv1.MachineNotUpToDateReason))
				f.machine("m3", time.Hour, withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason))
			},
			want: map[string]want{controlplanev1.MachinesUpToDateCondition: {metav1.ConditionFalse, controlplanev1.NotUpToDateReason, "m2"}}},
		{name: "Machines' UpToDate conditions not set yet",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
			},
			want: map[string]want{controlplanev1.MachinesUpToDateCondition: {metav1.ConditionUnknown, controlplanev1.UpToDateUnknownReason, ""}}},
		{name: "Machines' Ready unknown",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, withCondition(clusterv1.MachineReadyCondition, metav1.ConditionUnknown, "Unknown"))
			},
			want: map[string]want{controlplanev1.MachinesReadyCondition: {metav1.ConditionUnknown, controlplanev1.ReadyUnknownReason, ""}}},
		{name: "rolling out, blocked by preflight",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.kcp.Spec.Version = "v1.32.0"
				f.machine("m4", time.Minute, notReady())
			},
			observe: func(s *scope) {
				s.preflightMessages = []string{"Machine m4 is not ready"}
				s.halt("preflight checks failed: Machine m4 is not ready")
			},
			want: map[string]want{
				controlplanev1.RollingOutCondition: {metav1.ConditionTrue, controlplanev1.RollingOutReason,
					"* Machine m1: version v1.31.2, want v1.32.0\n* Machine m2: version v1.31.2, want v1.32.0\n* Machine m3: version v1.31.2, want v1.32.0\n* Machine m4 is not ready"},
				controlplanev1.ScalingDownCondition: {metav1.ConditionTrue, controlplanev1.ScalingDownReason,
					"* scaling down from 4 to 3 replicas\n* preflight checks failed: Machine m4 is not ready"},
				controlplanev1.ScalingUpCondition: {metav1.ConditionFalse, controlplanev1.NotScalingUpReason, ""},
			}},
		{name: "scaling up, blocked by a missing infrastructure template",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
			},
			observe: func(s *scope) {
				s.infraTemplateErr = "TestMachineTemplate y does not exist"
			},
			want: map[string]want{
				controlplanev1.ScalingUpCondition: {metav1.ConditionTrue, controlplanev1.ScalingUpReason,
					"* scaling up from 1 to 3 replicas\n* TestMachineTemplate y does not exist"},
			}},
		{name: "scaling down, blocked by preflight",
			setup: func(f *fixture) {
				f.replicas(1)
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
			},
			observe: func(s *scope) {
				s.halt("preflight checks failed: removing Machine m1 would lose etcd quorum")
			},
			want: map[string]want{
				controlplanev1.ScalingDownCondition: {metav1.ConditionTrue, controlplanev1.ScalingDownReason,
					"* scaling down from 2 to 1 replicas\n* preflight checks failed: removing Machine m1 would lose etcd quorum"},
			}},
		{name: "deleting Machines do not count as active for scaling",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
			},
			want: map[string]want{controlplanev1.ScalingUpCondition: {metav1.ConditionTrue, controlplanev1.ScalingUpReason, "scaling up from 2 to 3 replicas"}}},
		{name: "remediation blocked",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			observe: func(s *scope) {
				s.remediationReason = controlplanev1.RemediationBlockedQuorumReason
				s.remediationMessages = []string{"first", "second"}
			},
			want: map[string]want{controlplanev1.RemediatingCondition: {metav1.ConditionTrue, controlplanev1.RemediationBlockedQuorumReason, "* first\n* second"}}},
		{name: "certificates failed",
			observe: func(s *scope) { s.certificatesErr = errors.New("boom") },
			want: map[string]want{controlplanev1.CertificatesAvailableCondition: {metav1.ConditionFalse, controlplanev1.CertificatesInternalErrorReason,
				"cannot create or read the cluster certificates"}}},
		{name: "deleting",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
				f.kcp.Finalizers = []string{Finalizer}
			},
			observe: func(s *scope) {
				s.deletingReason = controlplanev1.DeletingWaitingForMachinesReason
				s.deletingMessage = "deleting control-plane Machine(s) m1, m2"
			},
			want: map[string]want{
				controlplanev1.DeletingCondition:  {metav1.ConditionTrue, controlplanev1.DeletingWaitingForMachinesReason, "deleting control-plane Machine(s) m1, m2"},
				controlplanev1.AvailableCondition: {metav1.ConditionFalse, controlplanev1.NotAvailableReason, ""},
			}},
	}
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
			updateStatus(ctx, s)
			for typ, w := range tc.want {
				c := conditions.Get(f.kcp, typ)
				if c == nil {
					t.Errorf("%s not set", typ)
					continue
				}
				if c.Status != w.status || c.Reason != w.reason {
					t.Errorf("%s = %s/%s %q, want %s/%s", typ, c.Status, c.Reason, c.Message, w.status, w.reason)
				}
				if !strings.Contains(c.Message, w.message) {
					t.Errorf("%s message = %q, want it to contain %q", typ, c.Message, w.message)
				}
			}
			// Every owned condition but Paused is always set.
			for _, typ := range ownedConditions[1:] {
				if conditions.Get(f.kcp, typ) == nil {
					t.Errorf("%s not set", typ)
				}
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
