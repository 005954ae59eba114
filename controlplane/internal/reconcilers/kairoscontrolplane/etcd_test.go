package kairoscontrolplane

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func k3sNode(name string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

func TestEtcdMemberships(t *testing.T) {
	noConditions := &unstructured.Unstructured{}
	noConditions.SetGroupVersionKind(k0sEtcdMemberGVK)
	noConditions.SetName("no-status")
	otherCondition := k0sMember("other-condition", false, true)
	_ = unstructured.SetNestedSlice(otherCondition.Object, []any{map[string]any{"type": "Ready", "status": "True"}}, "status", "conditions")

	cases := []struct {
		name    string
		k3s     bool
		objs    []client.Object
		err     error
		want    etcdMembers
		wantErr string
	}{
		{name: "k0s",
			objs: []client.Object{
				k0sMember("joined", false, true),
				k0sMember("not-joined", false, false),
				k0sMember("left", true, false),   // left: no member any more
				k0sMember("leaving", true, true), // leave requested, still a member
				noConditions, otherCondition,     // no Joined condition: not joined
				k3sNode("plain-node", map[string]string{k3sEtcdNodeNameAnnotation: "x"}), // Nodes do not count on k0s
			},
			want: etcdMembers{"joined": true, "not-joined": false, "leaving": true, "no-status": false, "other-condition": false}},
		{name: "k0s without members", want: etcdMembers{}},
		{name: "k3s", k3s: true,
			objs: []client.Object{
				k3sNode("server-1", map[string]string{k3sEtcdNodeNameAnnotation: "server-1-abc"}),
				k3sNode("server-2", map[string]string{k3sEtcdNodeNameAnnotation: "server-2-abc", k3sEtcdRemoveAnnotation: "true"}),
				k3sNode("server-3", map[string]string{k3sEtcdNodeNameAnnotation: "server-3-abc", k3sEtcdRemovedAnnotation: "server-3-abc"}),
				k3sNode("agent", nil),
				k0sMember("k0s-member", false, true), // EtcdMembers do not count on k3s
			},
			want: etcdMembers{"server-1": true, "server-2": true, "server-3": false}},
		{name: "workload cluster unreachable", err: errors.New("not connected"), wantErr: "not connected"},
		{name: "k3s workload cluster unreachable", k3s: true, err: errors.New("not connected"), wantErr: "not connected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			if tc.k3s {
				f.k3s()
			}
			f.workloadObjs = tc.objs
			f.workloadErr = tc.err
			e := f.build()
			got, err := e.r.etcdMemberships(ctx, e.scope(ctx))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("members = %v, want %v", got, tc.want)
			}
			if len(e.cache.keys) != 1 || e.cache.keys[0] != (client.ObjectKey{Namespace: testNS, Name: clusterName}) {
				t.Errorf("workload client asked for %v, want the Cluster's key", e.cache.keys)
			}
		})
	}
}

func TestEtcdMembersHealthy(t *testing.T) {
	if n := (etcdMembers{"a": true, "b": false, "c": true}).healthy(); n != 2 {
		t.Errorf("healthy = %d, want 2", n)
	}
	if n := (etcdMembers{}).healthy(); n != 0 {
		t.Errorf("healthy of none = %d", n)
	}
}

func TestRequestLeaveK0s(t *testing.T) {
	cases := []struct {
		name      string
		member    *unstructured.Unstructured
		wantGone  bool
		wantLeave bool
	}{
		{name: "joined member: leave requested", member: k0sMember("n1", false, true), wantLeave: true},
		{name: "leave requested, still joined: wait", member: k0sMember("n1", true, true), wantLeave: true},
		{name: "left", member: k0sMember("n1", true, false), wantGone: true, wantLeave: true},
		{name: "not joined yet: leave requested", member: k0sMember("n1", false, false), wantLeave: true},
		{name: "no member", wantGone: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			if tc.member != nil {
				f.workloadObjs = append(f.workloadObjs, tc.member)
			}
			e := f.build()
			gone, err := e.r.requestLeave(ctx, e.scope(ctx), "n1")
			if err != nil {
				t.Fatal(err)
			}
			if gone != tc.wantGone {
				t.Errorf("gone = %v, want %v", gone, tc.wantGone)
			}
			if tc.member == nil {
				return
			}
			leave, _, _ := unstructured.NestedBool(e.getK0sMember("n1").Object, "spec", "leave")
			if leave != tc.wantLeave {
				t.Errorf("spec.leave = %v, want %v", leave, tc.wantLeave)
			}
			// The status k0s owns is not touched.
			if k0sMemberJoined(e.getK0sMember("n1")) != k0sMemberJoined(tc.member) {
				t.Error("Joined condition changed")
			}
		})
	}
}

func TestRequestLeaveK3s(t *testing.T) {
	cases := []struct {
		name       string
		node       *corev1.Node
		wantGone   bool
		wantRemove string
	}{
		{name: "member: removal requested",
			node:       k3sNode("n1", map[string]string{k3sEtcdNodeNameAnnotation: "n1-abc", "keep": "me"}),
			wantRemove: "true"},
		{name: "removal requested: wait",
			node:       k3sNode("n1", map[string]string{k3sEtcdNodeNameAnnotation: "n1-abc", k3sEtcdRemoveAnnotation: "true"}),
			wantRemove: "true"},
		{name: "removed",
			node:     k3sNode("n1", map[string]string{k3sEtcdNodeNameAnnotation: "n1-abc", k3sEtcdRemovedAnnotation: "n1-abc"}),
			wantGone: true},
		{name: "never a member",
			node:     k3sNode("n1", nil),
			wantGone: true},
		{name: "no node", wantGone: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t).k3s()
			if tc.node != nil {
				f.workloadObjs = append(f.workloadObjs, tc.node)
			}
			e := f.build()
			gone, err := e.r.requestLeave(ctx, e.scope(ctx), "n1")
			if err != nil {
				t.Fatal(err)
			}
			if gone != tc.wantGone {
				t.Errorf("gone = %v, want %v", gone, tc.wantGone)
			}
			if tc.node == nil {
				return
			}
			n := e.getNode("n1")
			if got := n.Annotations[k3sEtcdRemoveAnnotation]; got != tc.wantRemove {
				t.Errorf("remove annotation = %q, want %q", got, tc.wantRemove)
			}
			for k, v := range tc.node.Annotations {
				if n.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q kept", k, n.Annotations[k], v)
				}
			}
		})
	}
}

func TestRequestLeaveUnreachable(t *testing.T) {
	for _, k3s := range []bool{false, true} {
		ctx := testContext(t)
		f := newFixture(t)
		if k3s {
			f.k3s()
		}
		f.workloadErr = errors.New("not connected")
		e := f.build()
		if gone, err := e.r.requestLeave(ctx, e.scope(ctx), "n1"); err == nil || gone {
			t.Errorf("k3s=%v: requestLeave = %v, %v; want an error", k3s, gone, err)
		}
	}
}

func TestQuorumAfterRemoval(t *testing.T) {
	machine := func(node string) *clusterv1.Machine {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
		m.Status.NodeRef.Name = node
		return m
	}
	cases := []struct {
		name    string
		members etcdMembers
		machine *clusterv1.Machine
		want    bool
	}{
		{"3 healthy, remove one", etcdMembers{"a": true, "b": true, "c": true}, machine("a"), true},
		{"3 with one down, remove a healthy one", etcdMembers{"a": true, "b": true, "c": false}, machine("a"), false},
		{"3 with one down, remove the down one", etcdMembers{"a": true, "b": true, "c": false}, machine("c"), true},
		{"2 healthy, remove one", etcdMembers{"a": true, "b": true}, machine("a"), true},
		{"1 member, remove it", etcdMembers{"a": true}, machine("a"), false},
		{"no members", etcdMembers{}, nil, false},
		{"5 with two down, remove a healthy one", etcdMembers{"a": true, "b": true, "c": true, "d": false, "e": false}, machine("a"), false},
		{"5 with one down, remove a healthy one", etcdMembers{"a": true, "b": true, "c": true, "d": true, "e": false}, machine("a"), true},
		{"4 with one down, remove a healthy one", etcdMembers{"a": true, "b": true, "c": true, "d": false}, machine("a"), true},
		{"Machine without a member", etcdMembers{"a": true, "b": true, "c": false}, machine("x"), true},
		{"Machine without a node", etcdMembers{"a": true, "b": true, "c": true}, &clusterv1.Machine{}, true},
		{"Machine without a node, quorum already lost", etcdMembers{"a": true, "b": false, "c": false}, &clusterv1.Machine{}, false},
		{"nil Machine", etcdMembers{"a": true, "b": true, "c": false}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := quorumAfterRemoval(tc.members, tc.machine); got != tc.want {
				t.Errorf("quorumAfterRemoval = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMachinesWithoutMember(t *testing.T) {
	f := newFixture(t)
	f.machine("a", time.Hour)
	f.machine("b", time.Hour)
	f.machine("c", time.Hour, withoutNode())
	s := f.build().scope(testContext(t))
	got := machinesWithoutMember(s.machines, etcdMembers{"a": true, "b": false})
	if machineNames(got) != "b" {
		t.Errorf("without member = %s, want b (c has no node yet)", machineNames(got))
	}
}

func TestReconcilePreTerminateHooks(t *testing.T) {
	waiting := clusterv1.MachineDeletingWaitingForPreTerminateHookReason
	cases := []struct {
		name  string
		setup func(f *fixture)
		// wantHook says whether m1 keeps its hook; wantLeave whether its member was asked to leave.
		wantHook    bool
		wantLeave   bool
		wantHalted  bool
		wantWait    string
		wantRequeue time.Duration
	}{
		{name: "nothing deleting",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
			},
			wantHook: true},
		{name: "deleting, not drained yet (no Deleting condition)",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, ""))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantHalted: true, wantRequeue: requeueWhileBusy,
			wantWait: "waiting for Machine m1 to be drained before its etcd member leaves"},
		{name: "deleting, still draining",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, clusterv1.MachineDeletingDrainingNodeReason))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "to be drained"},
		{name: "waiting for the hook, condition False",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, ""), withCondition(clusterv1.MachineDeletingCondition, metav1.ConditionFalse, waiting))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "to be drained"},
		{name: "waiting for the hook: leave requested, hook kept",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantLeave: true, wantHalted: true, wantRequeue: requeueWhileBusy,
			wantWait: "waiting for the etcd member of Machine m1 to leave"},
		{name: "member still leaving: hook kept",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.members["m1"] = memberLeaving
			},
			wantHook: true, wantLeave: true, wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "to leave"},
		{name: "member left: hook removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.members["m1"] = memberLeft
			},
			wantLeave: true, wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "waiting for Machine m1 to be deleted"},
		{name: "member never existed: hook removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				delete(f.members, "m1")
			},
			wantHalted: true, wantRequeue: requeueWhileBusy},
		{name: "last Machine: hook removed without removing the member",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "waiting for Machine m1 to be deleted"},
		{name: "Cluster deleting: hook removed without removing the member",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.cluster.DeletionTimestamp = ptr.To(metav1.Now())
				f.cluster.Finalizers = []string{"cluster.cluster.x-k8s.io"}
			},
			wantHalted: true, wantRequeue: requeueWhileBusy},
		{name: "Machine without a node: hook removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutNode())
				f.machine("m2", time.Hour)
			},
			wantHalted: true, wantRequeue: requeueWhileBusy},
		{name: "hook already removed: waits for the Machine to go",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutHook())
				f.machine("m2", time.Hour)
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "waiting for Machine m1 to be deleted"},
		{name: "workload cluster unreachable: hook kept",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.workloadErr = errors.New("connection refused")
			},
			wantHook: true, wantHalted: true, wantRequeue: requeueWhileBusy,
			wantWait: "cannot reach the workload cluster to remove the etcd member of Machine m1: connection refused"},
		{name: "the oldest deletion first",
			setup: func(f *fixture) {
				f.machine("m2", time.Hour, deleting(time.Minute, waiting))
				f.machine("m1", time.Hour, deleting(time.Hour, waiting))
				f.machine("m3", time.Hour)
			},
			wantHook: true, wantLeave: true, wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "Machine m1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			res, err := e.r.reconcilePreTerminateHooks(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if s.halted != tc.wantHalted {
				t.Errorf("halted = %v, want %v", s.halted, tc.wantHalted)
			}
			containsAll(t, "waitMessage", s.waitMessage, tc.wantWait)
			m1 := e.getMachine("m1")
			if m1 == nil {
				t.Fatal("m1 is gone")
			}
			if hasHook(m1) != tc.wantHook {
				t.Errorf("m1 has hook = %v, want %v", hasHook(m1), tc.wantHook)
			}
			if _, ok := f.members["m1"]; ok && f.workloadErr == nil {
				leave, _, _ := unstructured.NestedBool(e.getK0sMember("m1").Object, "spec", "leave")
				if leave != tc.wantLeave {
					t.Errorf("m1 member spec.leave = %v, want %v", leave, tc.wantLeave)
				}
			}
			// Other Machines' members are never touched.
			for _, name := range []string{"m2", "m3"} {
				if mem, ok := f.members[name]; ok && mem == memberJoined && f.workloadErr == nil {
					if leave, _, _ := unstructured.NestedBool(e.getK0sMember(name).Object, "spec", "leave"); leave {
						t.Errorf("%s member asked to leave", name)
					}
				}
			}
			if tc.name == "the oldest deletion first" && !hasHook(e.getMachine("m2")) {
				t.Error("m2 lost its hook before m1's member left")
			}
		})
	}
}

func TestReconcilePreTerminateHooksK3s(t *testing.T) {
	ctx := testContext(t)
	waiting := clusterv1.MachineDeletingWaitingForPreTerminateHookReason
	f := newFixture(t).k3s()
	f.machine("m1", time.Hour, deleting(time.Minute, waiting))
	f.machine("m2", time.Hour)
	e := f.build()

	if _, err := e.r.reconcilePreTerminateHooks(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if n := e.getNode("m1"); n.Annotations[k3sEtcdRemoveAnnotation] != "true" {
		t.Errorf("m1 node annotations = %v, want the remove annotation", n.Annotations)
	}
	if !hasHook(e.getMachine("m1")) {
		t.Fatal("hook removed before k3s removed the member")
	}

	// k3s removes the member and records it on the Node.
	n := e.getNode("m1")
	n.Annotations[k3sEtcdRemovedAnnotation] = n.Annotations[k3sEtcdNodeNameAnnotation]
	if err := e.wc.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	s := e.scope(ctx)
	if _, err := e.r.reconcilePreTerminateHooks(ctx, s); err != nil {
		t.Fatal(err)
	}
	if hasHook(e.getMachine("m1")) {
		t.Errorf("hook kept after the member was removed (%s)", s.waitMessage)
	}
	if e.getNode("m2").Annotations[k3sEtcdRemoveAnnotation] != "" {
		t.Error("m2 asked to leave")
	}
}
