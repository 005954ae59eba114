package kairoscontrolplane

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func TestReconcileReplicas(t *testing.T) {
	const newVersion = "v1.32.0"
	upgrade := func(f *fixture) { f.kcp.Spec.Version = newVersion }
	cases := []struct {
		name  string
		setup func(f *fixture)
		// wantCreated is the number of Machines created; wantDeleted the Machines deleted.
		wantCreated int
		wantDeleted []string
		wantHalted  bool
		wantWait    string
		wantRequeue time.Duration
		// wantPreflight are substrings of the recorded preflight failures.
		wantPreflight []string
	}{
		{name: "no Machines: creates the first",
			setup:       func(f *fixture) { f.notInitialized() },
			wantCreated: 1, wantHalted: true, wantWait: "created a control-plane Machine"},
		{name: "no Machines and initialized (all were lost): creates one without preflight",
			setup:       func(f *fixture) {},
			wantCreated: 1, wantHalted: true},
		{name: "first Machine not initialized yet: waits",
			setup: func(f *fixture) {
				f.notInitialized()
				f.machine("m1", time.Minute, notReady(), withoutNode())
			},
			wantHalted: true, wantWait: "waiting for Machine m1 to initialize the control plane"},
		{name: "initialized, 1 of 3: scales up",
			setup:       func(f *fixture) { f.machine("m1", time.Hour) },
			wantCreated: 1, wantHalted: true},
		{name: "3 of 3 up to date: nothing to do",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
			}},
		{name: "3 of 1: scales down the oldest",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", 3*time.Hour)
				f.machine("m3", 2*time.Hour)
				f.replicas(1)
			},
			wantDeleted: []string{"m2"}, wantHalted: true, wantWait: "deleting Machine m2"},
		{name: "2 active of 3 with one deleting: waits for the deletion first",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"Machine(s) m3 are being deleted"}},
		{name: "outdated, maxSurge 1, at replicas: scales up first",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				upgrade(f)
			},
			wantCreated: 1, wantHalted: true},
		{name: "outdated, maxSurge 1, at replicas+1: scales down the oldest outdated",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 4*time.Hour)
				f.machine("m3", 2*time.Hour)
				upgrade(f)
				f.machine("m4", time.Minute) // the replacement, up to date
			},
			wantDeleted: []string{"m2"}, wantHalted: true},
		{name: "outdated, maxSurge 1, below replicas: scales up",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				upgrade(f)
			},
			wantCreated: 1, wantHalted: true},
		{name: "outdated, maxSurge 0, at replicas: scales down first",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 4*time.Hour)
				f.machine("m3", 2*time.Hour)
				upgrade(f)
				f.maxSurge(0)
			},
			wantDeleted: []string{"m2"}, wantHalted: true},
		{name: "outdated, maxSurge 0, below replicas: scales up",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				upgrade(f)
				f.maxSurge(0)
			},
			wantCreated: 1, wantHalted: true},
		{name: "outdated by rollout.after only, at replicas: scales up",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.kcp.Spec.Rollout.After.Time = f.now.Add(-time.Minute)
			},
			wantCreated: 1, wantHalted: true},
		{name: "preflight: a Machine is not ready",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour, notReady())
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"Machine m2 is not ready"},
			wantWait: "preflight checks failed: Machine m2 is not ready"},
		{name: "preflight: a Machine's node is no etcd member",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.removeByName("m2")
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"Machine m2: etcd's members are m1; none is hosted on this Machine (Node m2)"}},
		{name: "preflight: a dead etcd behind a Ready kubelet and a Joined EtcdMember",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour)
				f.replicas(5)
				f.member("m2").state = memberDown
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"Machine m2: etcd member m2 does not answer at 10.0.0.11:2379"}},
		{name: "preflight: k3s member removed",
			setup: func(f *fixture) {
				f.k3s()
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.removeByName(f.memberName("m2"))
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"Machine m2: etcd's members are m1-1a2b3c4d; none is hosted on this Machine (Node m2)"}},
		{name: "preflight: an etcd member that belongs to no Machine",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.etcd.add("stray", "10.0.9.9")
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"etcd member stray (peer 10.0.9.9) belongs to no control-plane Machine"}},
		{name: "preflight: k3s all members joined: scales up",
			setup: func(f *fixture) {
				f.k3s()
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
			},
			wantCreated: 1, wantHalted: true},
		{name: "preflight: etcd unreadable (fails closed)",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.member("m1").state = memberPartitioned
			},
			wantHalted: true, wantRequeue: requeueWhileBusy,
			wantPreflight: []string{"cannot read etcd's member list with quorum"}},
		{name: "preflight: no scale down while a member matches no Machine, whatever its health",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.replicas(1)
				f.etcd.add("stale", "10.0.9.9").state = memberDown
			},
			wantHalted: true, wantRequeue: requeueWhileBusy,
			wantPreflight: []string{"etcd member stale (peer 10.0.9.9) belongs to no control-plane Machine", "removing Machine m1 would lose etcd quorum: etcd member(s) stale match no Machine, so their votes are not counted on"}},
		{name: "5 to 3 with a broken Machine: the broken one goes first, outside its own preflight",
			setup: func(f *fixture) {
				f.machine("m1", 5*time.Hour)
				f.machine("m2", 4*time.Hour)
				f.machine("m3", 3*time.Hour, notReady())
				f.machine("m4", 2*time.Hour)
				f.machine("m5", time.Hour)
				f.member("m3").state = memberDown
			},
			wantDeleted: []string{"m3"}, wantHalted: true, wantWait: "deleting Machine m3"},
		{name: "scale down: the delete-machine annotation first",
			setup: func(f *fixture) {
				f.machine("m1", 5*time.Hour)
				f.machine("m2", 4*time.Hour, withAnnotation(clusterv1.DeleteMachineAnnotation, ""))
				f.machine("m3", 3*time.Hour)
				f.machine("m4", 2*time.Hour)
				f.machine("m5", time.Hour)
			},
			wantDeleted: []string{"m2"}, wantHalted: true},
		{name: "rollout: an annotated outdated Machine before older outdated ones",
			setup: func(f *fixture) {
				f.machine("m1", 5*time.Hour)
				f.machine("m2", 4*time.Hour)
				f.machine("m3", 3*time.Hour, withAnnotation(clusterv1.DeleteMachineAnnotation, ""))
				upgrade(f)
				f.machine("m4", time.Hour)
			},
			wantDeleted: []string{"m3"}, wantHalted: true},
		{name: "preflight: several failures are all reported, sorted",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, notReady())
				f.machine("m2", 2*time.Hour, notReady())
				f.machine("m3", time.Hour)
				f.etcd.removeByName("m3")
				upgrade(f)
			},
			wantHalted: true, wantRequeue: requeueWhileBusy,
			wantPreflight: []string{"Machine m1 is not ready", "Machine m2 is not ready", "Machine m3: etcd's members are m1, m2; none is hosted on this Machine"}},
		{name: "missing KairosConfigTemplate: scale up waits for it",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "missing"}
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantWait: "KairosConfigTemplate missing does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			res, err := e.r.reconcileReplicas(ctx, s)
			if err != nil {
				t.Fatalf("reconcileReplicas: %v", err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if s.halted != tc.wantHalted {
				t.Errorf("halted = %v (%q), want %v", s.halted, s.waitMessage, tc.wantHalted)
			}
			containsAll(t, "waitMessage", s.waitMessage, tc.wantWait)
			created := e.newMachines()
			if len(created) != tc.wantCreated {
				t.Errorf("created %d Machines, want %d", len(created), tc.wantCreated)
			}
			for _, m := range created {
				if m.Spec.Version != f.kcp.Spec.Version {
					t.Errorf("created Machine %s has version %s, want %s", m.Name, m.Spec.Version, f.kcp.Spec.Version)
				}
			}
			if got := e.deletedMachines(); !slices.Equal(got, tc.wantDeleted) {
				t.Errorf("deleted %v, want %v", got, tc.wantDeleted)
			}
			if len(s.preflightMessages) != len(tc.wantPreflight) {
				t.Errorf("preflight messages = %q, want %q", s.preflightMessages, tc.wantPreflight)
			}
			containsAll(t, "preflight messages", strings.Join(s.preflightMessages, "\n"), tc.wantPreflight...)
			if !slices.IsSorted(s.preflightMessages) {
				t.Errorf("preflight messages not sorted: %q", s.preflightMessages)
			}
		})
	}
}

// TestRollingUpdateSequence drives a three-Machine upgrade with maxSurge 1 step by step: each
// step creates or deletes exactly one Machine, the replacements carry the new version, and the
// rollout ends with three up-to-date Machines.
func TestRollingUpdateSequence(t *testing.T) {
	for _, surge := range []int{0, 1} {
		t.Run(fmt.Sprintf("maxSurge %d", surge), func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t).maxSurge(surge)
			f.machine("m1", 3*time.Hour)
			f.machine("m2", 2*time.Hour)
			f.machine("m3", time.Hour)
			f.kcp.Spec.Version = "v1.32.0"
			e := f.build()
			var steps []string
			for i := 0; i < 12; i++ {
				s := e.scope(ctx)
				if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
					t.Fatal(err)
				}
				if !s.halted {
					break
				}
				steps = append(steps, s.waitMessage)
				if len(s.preflightMessages) > 0 {
					t.Fatalf("preflight failed: %q", s.preflightMessages)
				}
				e.settle(ctx)
			}
			machines := e.listMachines()
			if len(machines) != 3 {
				t.Fatalf("ended with %d Machines, want 3 (steps %q)", len(machines), steps)
			}
			for _, m := range machines {
				if m.Spec.Version != "v1.32.0" {
					t.Errorf("Machine %s still has version %s", m.Name, m.Spec.Version)
				}
			}
			if len(steps) != 6 {
				t.Errorf("rollout took %d steps, want 6 (3 creations, 3 deletions): %q", len(steps), steps)
			}
			first := "created"
			if surge == 0 {
				first = "deleting Machine m1"
			}
			if len(steps) > 0 && !strings.Contains(steps[0], first) {
				t.Errorf("first step = %q, want %q", steps[0], first)
			}
		})
	}
}

func TestScaleUpFailureDomain(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
		want  []string
	}{
		{name: "no failure domains: none set",
			setup: func(f *fixture) { f.machine("m1", time.Hour) },
			want:  []string{""}},
		{name: "the domain with the fewest Machines",
			setup: func(f *fixture) {
				f.failureDomains("a", "b", "c")
				f.machine("m1", 2*time.Hour, inFailureDomain("a"))
				f.machine("m2", time.Hour, inFailureDomain("b"))
			},
			want: []string{"c"}},
		{name: "only control-plane domains",
			setup: func(f *fixture) {
				f.failureDomains("a")
				f.cluster.Status.FailureDomains = append(f.cluster.Status.FailureDomains, clusterv1.FailureDomain{Name: "workers"})
				f.machine("m1", 2*time.Hour, inFailureDomain("a"))
			},
			want: []string{"a"}},
		{name: "the domain with the fewest up-to-date Machines during a rollout",
			setup: func(f *fixture) {
				f.failureDomains("a", "b")
				f.machine("m1", 2*time.Hour, inFailureDomain("b"))
				f.kcp.Spec.Version = "v1.32.0"
				// a: one up-to-date Machine; b: one outdated Machine.
				f.machine("m2", time.Hour, inFailureDomain("a"))
			},
			want: []string{"b"}},
		{name: "ties between domains pick one of them",
			setup: func(f *fixture) {
				f.failureDomains("a", "b", "c")
				f.replicas(5)
				f.machine("m1", 3*time.Hour, inFailureDomain("a"))
				f.machine("m2", 2*time.Hour, inFailureDomain("b"))
				f.machine("m3", time.Hour, inFailureDomain("c"))
			},
			want: []string{"a", "b", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
				t.Fatal(err)
			}
			created := e.newMachines()
			if len(created) != 1 {
				t.Fatalf("created %d Machines, want 1", len(created))
			}
			if fd := created[0].Spec.FailureDomain; !slices.Contains(tc.want, fd) {
				t.Errorf("failure domain = %q, want one of %q", fd, tc.want)
			}
		})
	}
}

func TestScaleDownPick(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
		want  string
	}{
		{name: "oldest in the most populated domain, not the oldest overall",
			setup: func(f *fixture) {
				f.failureDomains("a", "b", "c")
				f.machine("m1", 9*time.Hour, inFailureDomain("a"))
				f.machine("m2", 3*time.Hour, inFailureDomain("b"))
				f.machine("m3", 4*time.Hour, inFailureDomain("b"))
				f.machine("m4", time.Hour, inFailureDomain("c"))
			},
			want: "m3"},
		{name: "outdated Machine in the domain with the most outdated Machines",
			setup: func(f *fixture) {
				f.failureDomains("a", "b")
				f.machine("m1", 9*time.Hour, inFailureDomain("a"))
				f.machine("m2", 3*time.Hour, inFailureDomain("b"))
				f.machine("m3", 4*time.Hour, inFailureDomain("b"))
				f.kcp.Spec.Version = "v1.32.0"
				f.machine("m4", time.Minute, inFailureDomain("a"))
			},
			want: "m3"},
		{name: "outdated before up to date even when younger",
			setup: func(f *fixture) {
				f.machine("m1", 9*time.Hour)
				f.machine("m2", 8*time.Hour)
				f.machine("m3", 7*time.Hour)
				f.machine("m4", time.Minute, withVersion("v1.30.0"))
			},
			want: "m4"},
		{name: "Machines outside every known domain: oldest",
			setup: func(f *fixture) {
				f.failureDomains("a")
				f.machine("m1", time.Hour, inFailureDomain("gone"))
				f.machine("m2", 3*time.Hour, inFailureDomain("gone"))
				f.machine("m3", 2*time.Hour, inFailureDomain("gone"))
				f.machine("m4", 2*time.Hour, inFailureDomain("gone"))
			},
			want: "m2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
				t.Fatal(err)
			}
			if got := e.deletedMachines(); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("deleted %v, want [%s] (%s)", got, tc.want, s.waitMessage)
			}
		})
	}
}

func TestMaxSurge(t *testing.T) {
	f := newFixture(t)
	s := &scope{kcp: f.kcp}
	if got := maxSurge(s); got != 1 {
		t.Errorf("defaulted maxSurge = %d, want 1", got)
	}
	f.kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = nil
	if got := maxSurge(s); got != controlplanev1.DefaultMaxSurge {
		t.Errorf("unset maxSurge = %d, want %d", got, controlplanev1.DefaultMaxSurge)
	}
	f.maxSurge(0)
	if got := maxSurge(s); got != 0 {
		t.Errorf("maxSurge = %d, want 0", got)
	}
}

// TestScaleDownOutsideTheSkewPolicy: with the bootstrap provider outside the version-skew policy
// the control plane leaves its running Machines alone: a scale-down deletes none, and the
// scaling condition says why.
func TestScaleDownOutsideTheSkewPolicy(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).replicas(1)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	f.bootstrapCRD = bootstrapCRDObject("v0.5.0")
	e := f.build()
	e.r.Version = "v0.2.0"
	s := e.scope(ctx)
	res, err := e.r.reconcileReplicas(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if deleted := e.deletedMachines(); len(deleted) > 0 {
		t.Errorf("deleted %v outside the version-skew policy", deleted)
	}
	if !s.halted || res.RequeueAfter != bootstrapRecheck {
		t.Errorf("halted = %v, requeue %s; want halted and a look again after %s", s.halted, res.RequeueAfter, bootstrapRecheck)
	}
	containsAll(t, "waitMessage", s.waitMessage, "deleting no Machine", "bootstrap provider v0.5.0 is outside the version-skew policy")
	setScalingDownCondition(s)
	containsAll(t, "ScalingDown", conditions.Get(s.kcp, controlplanev1.ScalingDownCondition).Message, "deleting no Machine")
}
