package kairoscontrolplane

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func TestObserveEtcd(t *testing.T) {
	cases := []struct {
		name  string
		k3s   bool
		setup func(f *fixture)
		// wantErr is part of the error when the member list cannot be read.
		wantErr string
		// want is each Machine's EtcdMemberHealthy status and part of its message.
		want map[string]string
		// wantOrphans names the members no Machine hosts.
		wantOrphans []string
	}{
		{name: "three healthy members",
			setup: func(f *fixture) { f.machine("m1", time.Hour); f.machine("m2", time.Hour); f.machine("m3", time.Hour) },
			want:  map[string]string{"m1": "True", "m2": "True", "m3": "True"}},
		{name: "k3s members are named after the node with a suffix",
			k3s:   true,
			setup: func(f *fixture) { f.machine("m1", time.Hour); f.machine("m2", time.Hour) },
			want:  map[string]string{"m1": "True", "m2": "True"}},
		{name: "a dead etcd behind a Ready kubelet is unhealthy",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			want: map[string]string{"m1": "True", "m2": "True", "m3": "False: etcd member m3 does not answer at 10.0.0.12:2379"}},
		{name: "a partitioned member has no leader",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m2").state = memberPartitioned
			},
			want: map[string]string{"m1": "True", "m2": "False: etcd member m2 has no leader", "m3": "True"}},
		{name: "learners and alarms",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m2").learner = true
				f.member("m3").alarm = etcdserverpb.AlarmType_NOSPACE
			},
			want: map[string]string{"m1": "True", "m2": "False: etcd member m2 is a learner", "m3": "False: etcd member m3 raised the NOSPACE alarm"}},
		{name: "quorum lost: nothing can be read, every member is unknown",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m1").state = memberDown
				f.member("m2").state = memberDown
			},
			wantErr: "request timed out",
			want:    map[string]string{"m1": "Unknown: No control-plane node answered", "m2": "Unknown", "m3": "Unknown"}},
		{name: "matched by name when the infrastructure reports no address, reached through the peer address",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour, withoutAddresses())
			},
			want: map[string]string{"m1": "True", "m2": "True"}},
		{name: "a k0s controller that joined etcd before its kubelet registered",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour, withoutNode())
				f.etcd.add("m2", address(1))
			},
			want: map[string]string{"m1": "True", "m2": "True"}},
		{name: "a Machine still provisioning has no member yet",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Minute, withoutNode())
			},
			want: map[string]string{"m1": "True", "m2": "Unknown: Waiting for the Machine's etcd member to join"}},
		{name: "a Machine with a Node but no member",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.members = f.etcd.members[:1]
			},
			want: map[string]string{"m1": "True", "m2": "False: etcd's members are m1; none is hosted on this Machine (Node m2)"}},
		{name: "a member no Machine hosts",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
			},
			want:        map[string]string{"m1": "True", "m2": "True", "m3": "True"},
			wantOrphans: []string{"stray"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			if tc.k3s {
				f.k3s()
			}
			tc.setup(f)
			s := f.build().scope(ctx)
			if s.etcd == nil {
				t.Fatal("etcd was not observed")
			}
			if tc.wantErr != "" {
				if s.etcd.known() || s.etcd.err == nil || !strings.Contains(s.etcd.err.Error(), tc.wantErr) {
					t.Fatalf("known = %v, err = %v, want an error with %q", s.etcd.known(), s.etcd.err, tc.wantErr)
				}
			} else if !s.etcd.known() {
				t.Fatalf("member list not read: %v", s.etcd.err)
			}
			for name, want := range tc.want {
				c := etcdMemberCondition(s, s.machines[name])
				status, msg, _ := strings.Cut(want, ": ")
				if string(c.Status) != status || !strings.Contains(c.Message, msg) {
					t.Errorf("Machine %s: EtcdMemberHealthy %s %q, want %s %q", name, c.Status, c.Message, status, msg)
				}
			}
			var orphans []string
			for _, o := range s.etcd.orphans() {
				orphans = append(orphans, o.Name)
			}
			if !slices.Equal(orphans, tc.wantOrphans) {
				t.Errorf("orphans = %v, want %v", orphans, tc.wantOrphans)
			}
		})
	}
}

func TestObserveEtcdNeedsTheEtcdCA(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	e := f.build()
	if err := e.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: clusterName + "-etcd"}}); err != nil {
		t.Fatal(err)
	}
	s := e.scope(ctx)
	if s.etcd.known() || s.etcd.err == nil || !strings.Contains(s.etcd.err.Error(), "etcd CA") {
		t.Errorf("err = %v, want the missing etcd CA named", s.etcd.err)
	}
}

func TestMemberNamedAfter(t *testing.T) {
	for _, tc := range []struct {
		member, node string
		want         bool
	}{
		{"node-a", "node-a", true},
		{"node-a-0123abcd", "node-a", true},
		{"node-a-0123abc", "node-a", false},
		{"node-a-0123abcg", "node-a", false},
		{"node-ab", "node-a", false},
		{"node-a-b-0123abcd", "node-a", false},
	} {
		if got := memberNamedAfter(tc.member, tc.node); got != tc.want {
			t.Errorf("memberNamedAfter(%q, %q) = %v, want %v", tc.member, tc.node, got, tc.want)
		}
	}
}

func TestTargetQuorum(t *testing.T) {
	member := func(name string, healthy bool) *etcdMember {
		m := &etcdMember{ID: uint64(len(name)) + uint64(name[len(name)-1]), Name: name}
		if !healthy {
			m.problem = "down"
		}
		return m
	}
	a, b, c, d, e := member("a", true), member("b", true), member("c", true), member("d", true), member("e", true)
	down := member("x", false)
	cases := []struct {
		name    string
		members []*etcdMember
		remove  *etcdMember
		add     bool
		want    bool
	}{
		{"remove one of three healthy", []*etcdMember{a, b, c}, a, false, true},
		{"remove a healthy one of three with one down", []*etcdMember{a, b, down}, a, false, false},
		{"remove the down one of three", []*etcdMember{a, b, down}, down, false, true},
		{"remove one of five with one down", []*etcdMember{a, b, c, d, down}, a, false, true},
		{"add to one (best case: the new member counts healthy)", []*etcdMember{a}, nil, true, true},
		{"add to three healthy", []*etcdMember{a, b, c}, nil, true, true},
		{"add to two healthy of three (remediation replacement)", []*etcdMember{a, b}, nil, true, true},
		{"add to one healthy of two", []*etcdMember{a, down}, nil, true, false},
		{"remove nothing from five healthy", []*etcdMember{a, b, c, d, e}, nil, false, true},
		{"a learner blocks", []*etcdMember{a, b, {ID: 99, Name: "l", IsLearner: true}}, nil, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{etcd: &etcdState{members: tc.members}}
			ok, why := s.targetQuorum(tc.remove, tc.add)
			if ok != tc.want {
				t.Errorf("targetQuorum = %v (%s), want %v", ok, why, tc.want)
			}
			if !ok && why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestReconcilePreTerminateHooks(t *testing.T) {
	waiting := clusterv1.MachineDeletingWaitingForPreTerminateHookReason
	cases := []struct {
		name  string
		k3s   bool
		setup func(f *fixture)
		// wantHook says whether m1 keeps its hook; wantLeave whether its k0s EtcdMember was asked to
		// leave; wantRemoved whether its member was removed from etcd directly.
		wantHook    bool
		wantLeave   bool
		wantRemoved bool
		wantWait    string
		// wantMembers, when set, are etcd's members after the reconciliation; wantLeaveMessage
		// is what EtcdClusterHealthy is told about a member held back.
		wantMembers      []string
		wantLeaveMessage string
	}{
		{name: "nothing deleting",
			setup:    func(f *fixture) { f.machine("m1", time.Hour); f.machine("m2", time.Hour) },
			wantHook: true},
		{name: "deleting, not drained yet (no Deleting condition)",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, ""))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantWait: "waiting for Machine m1 to be drained before its etcd member leaves"},
		{name: "deleting, still draining",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, clusterv1.MachineDeletingDrainingNodeReason))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantWait: "to be drained"},
		{name: "other pre-terminate hooks run first",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withAnnotation(clusterv1.PreTerminateDeleteHookAnnotationPrefix+"/backup", ""))
				f.machine("m2", time.Hour)
			},
			wantHook: true, wantWait: "waiting for the other pre-terminate hooks of Machine m1 (pre-terminate.delete.hook.machine.cluster.x-k8s.io/backup)"},
		{name: "k0s: the EtcdMember is asked to leave, hook kept",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
			},
			wantHook: true, wantLeave: true, wantWait: "waiting for the etcd member m1 of Machine m1 to leave"},
		{name: "k0s did not act within the grace period: removed from etcd directly",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Hour, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.members["m1"] = memberLeaving
			},
			wantHook: true, wantLeave: true, wantRemoved: true, wantWait: "to leave"},
		{name: "k0s did not act within the grace period, and a member died since the quorum check: not removed, leave withdrawn",
			// The reconciliation's etcd observation (the first member list) sees three healthy
			// members; m3 dies before the direct remove, which reads etcd again (the second).
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Hour, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.members["m1"] = memberLeaving
				f.etcd.onMemberList = func(e *fakeEtcd, call int) {
					if call == 2 {
						for _, m := range e.members {
							if m.name == "m3" {
								m.state = memberDown
							}
						}
					}
				}
			},
			wantHook: true, wantWait: "cannot remove the etcd member of Machine m1: not removed: 1 of 2 voting members would be healthy, 2 needed (unhealthy: m3)"},
		{name: "no EtcdMember object (NotFound is no proof it left): removed from etcd directly",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				delete(f.members, "m1")
			},
			wantHook: true, wantRemoved: true, wantWait: "to leave"},
		{name: "a Machine whose kubelet never registered still has its member removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutNode())
				f.etcd.add("m1", address(0))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
			},
			wantHook: true, wantRemoved: true, wantWait: "to leave"},
		{name: "the member is gone from etcd's list: hook removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.etcd.members = f.etcd.members[1:]
				f.members["m1"] = memberLeft
			},
			wantLeave: true, wantWait: "waiting for Machine m1 to be deleted"},
		{name: "removing the member would lose quorum: hook kept, nothing asked",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "the etcd member of Machine m1 does not leave: 1 of 2 voting members would be healthy, 2 needed (unhealthy: m3)"},
		{name: "the Machine matches no member while a member matches no Machine: hook kept",
			// A k0s controller joined etcd before its Machine had an address or a Node; the member
			// that matches nothing may be its own, and m3's is dead: releasing the hook would take
			// a running member with the VM and leave 1 of 3.
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutAddresses(), withoutNode())
				f.etcd.add("controller-7f3a", "10.0.7.7")
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "Machine m1 matches no etcd member, but etcd member(s) controller-7f3a match no Machine: it may host one of them"},
		{name: "a member that matches no Machine is no voter to count on: hook kept, nothing asked",
			// m3's controller joined etcd before its Machine had an address or a Node. Counted as
			// healthy, its member would let m1's go (2 of 2); but it is m3's, and m3 may be the
			// next to go (a failed start, an MHC).
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Minute, withoutAddresses(), withoutNode())
				f.etcd.add("controller-7f3a", "10.0.7.7")
			},
			wantHook: true, wantMembers: []string{"controller-7f3a", "m1", "m2"},
			wantWait:         "the etcd member of Machine m1 does not leave: etcd member(s) controller-7f3a match no Machine, so their votes are not counted on",
			wantLeaveMessage: "the etcd member of Machine m1 does not leave: etcd member(s) controller-7f3a match no Machine"},
		{name: "a stray member that no Machine coming up can host is removed first, then the hook goes on",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
			},
			wantHook: true, wantRemoved: true, wantMembers: []string{"m1", "m2", "m3"},
			wantWait: "removed etcd member stray, which matched no Machine, before the member of Machine m1 leaves"},
		{name: "the deleted Machine's own member, unmatched, is removed while quorum holds without it",
			// Without this the hook (which waits for every member to be matched) and the removal of
			// members matching no Machine (which waits for deletions to end) would wait for each other.
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutAddresses(), withoutNode())
				f.etcd.add("controller-7f3a", "10.0.7.7")
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
			},
			wantHook: true, wantRemoved: true, wantMembers: []string{"m2", "m3"},
			wantWait: "removed etcd member controller-7f3a, which matched no Machine, before the member of Machine m1 leaves"},
		{name: "k0s: a leave already asked for is withdrawn when quorum would not survive it",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "the etcd member of Machine m1 does not leave: 1 of 2 voting members would be healthy"},
		{name: "k3s: a removal already asked for is withdrawn when quorum would not survive it",
			k3s: true,
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "the etcd member of Machine m1 does not leave"},
		{name: "k0s: a leave already asked for is withdrawn before a stray member is removed, when quorum would not survive it",
			// The stray appeared after m1 was asked to leave, and m3 died since. Removing the stray
			// is safe; returning with m1's leave in place is not: k0s would carry it out, leaving
			// 1 of 2 members up.
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
				f.etcd.add("stray", "10.0.9.9")
			},
			wantHook: true, wantRemoved: true, wantMembers: []string{"m1", "m2", "m3"},
			wantWait: "removed etcd member stray, which matched no Machine, before the member of Machine m1 leaves"},
		{name: "k3s: a removal already asked for is withdrawn before a stray member is removed, when quorum would not survive it",
			k3s: true,
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m3").state = memberDown
				f.etcd.add("stray", "10.0.9.9")
			},
			wantHook: true, wantRemoved: true, wantMembers: []string{"m1-1a2b3c4d", "m2-1a2b3c4d", "m3-1a2b3c4d"},
			wantWait: "removed etcd member stray, which matched no Machine, before the member of Machine m1 leaves"},
		{name: "k0s: etcd unreadable: a leave already asked for is withdrawn",
			// m2 and m3 went down after m1 was asked to leave: when one comes back, k0s could remove
			// m1 with the other still down.
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m2").state = memberDown
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "cannot tell whether Machine m1 hosts an etcd member"},
		{name: "k3s: etcd unreadable: a removal already asked for is withdrawn",
			k3s: true,
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m2").state = memberDown
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "cannot tell whether Machine m1 hosts an etcd member"},
		{name: "k0s: while a Machine deleting without our hook is waited for, a leave already asked for is withdrawn when quorum would not survive it",
			// m3's hook was removed by hand: its VM goes, and its member with it.
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(2*time.Minute, waiting))
				f.members["m1"] = memberLeaving
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, waiting), withoutHook())
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "waiting for Machine m3 to be deleted"},
		{name: "etcd unreadable: hook kept",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.member("m2").state = memberDown
				f.member("m3").state = memberDown
			},
			wantHook: true, wantWait: "cannot tell whether Machine m1 hosts an etcd member"},
		{name: "last Machine: hook removed without removing the member",
			setup:    func(f *fixture) { f.machine("m1", time.Hour, deleting(time.Minute, waiting)) },
			wantWait: "waiting for Machine m1 to be deleted"},
		{name: "Cluster deleting: hook removed without removing the member",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.cluster.DeletionTimestamp = ptr.To(metav1.Now())
				f.cluster.Finalizers = []string{"cluster.cluster.x-k8s.io"}
			},
			wantWait: "waiting for Machine m1 to be deleted"},
		{name: "hook already removed: waits for the Machine to go",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting), withoutHook())
				f.machine("m2", time.Hour)
			},
			wantWait: "waiting for Machine m1 to be deleted"},
		{name: "the oldest deletion first",
			setup: func(f *fixture) {
				f.machine("m2", time.Hour, deleting(10*time.Second, waiting))
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m3", time.Hour)
				f.machine("m4", time.Hour)
				f.machine("m5", time.Hour)
				f.members["m1"] = memberJoined
			},
			wantHook: true, wantLeave: true, wantWait: "Machine m1"},
		{name: "k3s: the Node is annotated for removal",
			k3s: true,
			setup: func(f *fixture) {
				f.machine("m1", time.Hour, deleting(time.Minute, waiting))
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
			},
			wantHook: true, wantLeave: true, wantWait: "waiting for the etcd member m1-1a2b3c4d of Machine m1 to leave"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			if tc.k3s {
				f.k3s()
			}
			tc.setup(f)
			before := f.etcd.names()
			e := f.build()
			s := e.scope(ctx)
			res, err := e.r.reconcilePreTerminateHooks(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			deletingAny := slices.ContainsFunc(f.machines, func(m *clusterv1.Machine) bool { return !m.DeletionTimestamp.IsZero() })
			if s.halted != deletingAny || (deletingAny && res.RequeueAfter != requeueWhileBusy) {
				t.Errorf("halted = %v, RequeueAfter = %s; want halted and requeued exactly while a Machine is deleting", s.halted, res.RequeueAfter)
			}
			containsAll(t, "waitMessage", s.waitMessage, tc.wantWait)
			m1 := e.getMachine("m1")
			if hasHook(m1) != tc.wantHook {
				t.Errorf("m1 has hook = %v, want %v", hasHook(m1), tc.wantHook)
			}
			asked := false
			if tc.k3s {
				asked = e.getNode("m1").Annotations[k3sEtcdRemoveAnnotation] == "true"
			} else if _, ok := f.members["m1"]; ok {
				asked, _, _ = unstructured.NestedBool(e.getK0sMember("m1").Object, "spec", "leave")
			}
			if asked != tc.wantLeave {
				t.Errorf("m1 asked to leave through the distribution = %v, want %v", asked, tc.wantLeave)
			}
			removed := len(f.etcd.names()) < len(before)
			if removed != tc.wantRemoved {
				t.Errorf("member removed from etcd = %v (members %v, before %v), want %v", removed, f.etcd.names(), before, tc.wantRemoved)
			}
			if removed && (!slices.Contains(f.etcd.names(), f.memberName("m2")) || len(before)-len(f.etcd.names()) != 1) {
				t.Errorf("members after removal = %v: only one may go, never m2's", f.etcd.names())
			}
			if tc.wantMembers != nil && !slices.Equal(f.etcd.names(), tc.wantMembers) {
				t.Errorf("members = %v, want %v", f.etcd.names(), tc.wantMembers)
			}
			containsAll(t, "EtcdClusterHealthy messages", strings.Join(s.etcdLeaveMessages, "\n"), tc.wantLeaveMessage)
			if tc.name == "the oldest deletion first" && !hasHook(e.getMachine("m2")) {
				t.Error("m2 lost its hook before m1's member left")
			}
		})
	}
}

// TestPreTerminateHookBeforeInitialization: etcd is not observed before the control plane is
// initialized; a Machine deleted then (with another one left) keeps its hook, and the hook says
// why instead of reading the missing observation.
func TestPreTerminateHookBeforeInitialization(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	f.machine("m1", time.Hour, deleting(time.Minute, clusterv1.MachineDeletingWaitingForPreTerminateHookReason))
	f.machine("m2", time.Hour)
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcilePreTerminateHooks(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !hasHook(e.getMachine("m1")) {
		t.Error("m1 lost its hook before etcd could be read")
	}
	containsAll(t, "waitMessage", s.waitMessage, "cannot tell whether Machine m1 hosts an etcd member: etcd is not observed before the control plane is initialized")
}

// TestPreTerminateHookKeepsQuorum: the pre-terminate hook of a Machine deleted by hand
// (kubectl delete machine) does not remove its etcd member while another member is down (k0s
// still reports it Joined): of the 2 members left, 1 would be healthy, and etcd would lose
// quorum.
func TestPreTerminateHookKeepsQuorum(t *testing.T) {
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

func TestReconcileEtcdMembers(t *testing.T) {
	controlNode := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(k0sControlNodeGVK)
		u.SetName(name)
		return u
	}
	cases := []struct {
		name         string
		setup        func(f *fixture)
		wantMembers  []string
		wantMessage  string
		wantK0sObjs  []string
		keepK0sNames []string
	}{
		{name: "an orphan member is removed",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.etcd.add("gone", "10.0.9.9").state = memberDown
			},
			wantMembers: []string{"m1", "m2", "m3"}},
		{name: "not while a Machine is provisioning: its member may be the orphan",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Minute, withoutNode(), withoutAddresses())
				f.etcd.add("m3-node", "10.0.9.9")
			},
			wantMembers: []string{"m1", "m2", "m3-node"}},
		{name: "not while a Machine is deleting",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
				f.etcd.add("gone", "10.0.9.9")
			},
			wantMembers: []string{"gone", "m1", "m2", "m3"}},
		{name: "not when it would lose quorum",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
				f.member("m2").state = memberPartitioned
			},
			wantMembers: []string{"m1", "m2", "stray"}, wantMessage: "etcd member stray belongs to no Machine but is not removed"},
		{name: "not when a member died since the reconciliation read etcd",
			// The scope's observation (the first member list) sees three healthy members; m2 dies
			// before the remove, which reads etcd again (the second).
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
				f.etcd.onMemberList = func(e *fakeEtcd, call int) {
					if call == 2 {
						for _, m := range e.members {
							if m.name == "m2" {
								m.state = memberDown
							}
						}
					}
				}
			},
			wantMembers: []string{"m1", "m2", "stray"}, wantMessage: "etcd member stray belongs to no Machine but is not removed: 1 of 2 voting members would be healthy, 2 needed (unhealthy: m2)"},
		{name: "k0s objects of controllers that left are deleted",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.machine("m3", time.Hour)
				f.workloadObjs = append(f.workloadObjs, k0sMember("old", true, false), controlNode("old"), controlNode("m1"))
			},
			wantMembers: []string{"m1", "m2", "m3"}, wantK0sObjs: []string{"m1", "m2", "m3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			if _, err := e.r.reconcileEtcdMembers(ctx, s); err != nil {
				t.Fatal(err)
			}
			if got := f.etcd.names(); !slices.Equal(got, tc.wantMembers) {
				t.Errorf("members = %v, want %v", got, tc.wantMembers)
			}
			containsAll(t, "cleanup messages", strings.Join(s.etcdLeaveMessages, "\n"), tc.wantMessage)
			if tc.wantK0sObjs != nil {
				for _, gvk := range []string{"EtcdMember", "ControlNode"} {
					list := &unstructured.UnstructuredList{}
					if gvk == "EtcdMember" {
						list.SetGroupVersionKind(k0sEtcdMemberGVK.GroupVersion().WithKind("EtcdMemberList"))
					} else {
						list.SetGroupVersionKind(k0sControlNodeGVK.GroupVersion().WithKind("ControlNodeList"))
					}
					if err := e.wc.List(ctx, list); err != nil {
						t.Fatal(err)
					}
					for _, o := range list.Items {
						if !slices.Contains(tc.wantK0sObjs, o.GetName()) {
							t.Errorf("%s %s was kept", gvk, o.GetName())
						}
					}
				}
			}
		})
	}
}

// A member whose etcd is dead while k0s keeps its EtcdMember Joined=True and the kubelet stays
// Ready is unhealthy: every operation that would remove a healthy member waits.
func TestDeadMemberBehindReadyKubeletBlocksRemovals(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	f.member("m3").state = memberDown // f.members["m3"] stays memberJoined: k0s still says Joined=True
	s := f.build().scope(ctx)
	if p := s.preflightProblems(s.machines["m1"]); len(p) == 0 {
		t.Error("removing m1 passes the preflight while m3's etcd is dead")
	}
	if c := etcdMemberCondition(s, s.machines["m3"]); c.Status != metav1.ConditionFalse {
		t.Errorf("m3 EtcdMemberHealthy = %s", c.Status)
	}
	_ = client.ObjectKey{}
	_ = controlplanev1.EtcdClusterHealthyCondition
}
