package kairoscontrolplane

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

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
			setup: func(f *fixture) {
				f.workloadErr = errors.New("unreachable")
			},
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
		{name: "deleting Machines do not count: 2 active of 3 scales up",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour)
				f.machine("m2", 2*time.Hour)
				f.machine("m3", time.Hour, deleting(time.Minute, ""))
			},
			wantCreated: 1, wantHalted: true},
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
		{name: "preflight: a Machine's etcd member has not joined",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.members["m2"] = memberNotJoined
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"etcd has no joined member for Machine(s) m2"}},
		{name: "preflight: a Machine's node has no etcd member at all",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				delete(f.members, "m2")
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"etcd has no joined member for Machine(s) m2"}},
		{name: "preflight: k3s member removed",
			setup: func(f *fixture) {
				f.k3s()
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.members["m2"] = memberLeft
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"etcd has no joined member for Machine(s) m2"}},
		{name: "preflight: k3s all members joined: scales up",
			setup: func(f *fixture) {
				f.k3s()
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
			},
			wantCreated: 1, wantHalted: true},
		{name: "preflight: workload cluster unreachable",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.workloadErr = errors.New("connection refused")
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"cannot read etcd members: connection refused"}},
		{name: "preflight: scale down would lose quorum",
			setup: func(f *fixture) {
				f.machine("m1", 2*time.Hour)
				f.machine("m2", time.Hour)
				f.replicas(1)
				// A member without a Machine that is down: 2 of 3 healthy, 1 of 2 after.
				f.workloadObjs = append(f.workloadObjs, k0sMember("stale", false, false))
			},
			wantHalted: true, wantRequeue: requeueWhileBusy, wantPreflight: []string{"removing Machine m1 would lose etcd quorum"}},
		{name: "preflight: several failures are all reported, sorted",
			setup: func(f *fixture) {
				f.machine("m1", 3*time.Hour, notReady())
				f.machine("m2", 2*time.Hour, notReady())
				f.machine("m3", time.Hour)
				f.members["m3"] = memberNotJoined
				upgrade(f)
			},
			wantHalted: true, wantRequeue: requeueWhileBusy,
			wantPreflight: []string{"Machine m1 is not ready", "Machine m2 is not ready", "etcd has no joined member for Machine(s) m3"}},
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
				// Settle: deleted Machines go away, new ones get a node and a joined member.
				for _, m := range e.listMachines() {
					if !m.DeletionTimestamp.IsZero() {
						m.Finalizers = nil
						if err := e.c.Update(ctx, &m); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if !m.Status.NodeRef.IsDefined() {
						m.Status.NodeRef.Name = m.Name
						withCondition(clusterv1.MachineReadyCondition, "True", clusterv1.MachineReadyReason)(&m)
						if err := e.c.Status().Update(ctx, &m); err != nil {
							t.Fatal(err)
						}
						for _, o := range workloadMember(f.kcp.Spec.Distribution, m.Name, memberJoined) {
							if err := e.wc.Create(ctx, o); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
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
