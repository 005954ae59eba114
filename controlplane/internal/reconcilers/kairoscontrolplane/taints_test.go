package kairoscontrolplane

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestReconcileControlPlaneTaints(t *testing.T) {
	tainted := func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&controlPlaneTaint) })
	}
	cases := []struct {
		name     string
		replicas int32
		machines []string
		// before says which Nodes start tainted; want which end tainted.
		before, want map[string]bool
	}{
		{name: "1 -> 3: the node bootstrapped alone gets the taint", replicas: 3, machines: []string{"m1"},
			before: map[string]bool{"m1": false}, want: map[string]bool{"m1": true}},
		{name: "3 -> 1 while three remain: tainted until the last goes", replicas: 1, machines: []string{"m1", "m2", "m3"},
			before: map[string]bool{"m1": true, "m2": true, "m3": true}, want: map[string]bool{"m1": true, "m2": true, "m3": true}},
		{name: "down to one: the last node loses the taint", replicas: 1, machines: []string{"m3"},
			before: map[string]bool{"m3": true}, want: map[string]bool{"m3": false}},
		{name: "single node stays untainted", replicas: 1, machines: []string{"m1"},
			before: map[string]bool{"m1": false}, want: map[string]bool{"m1": false}},
		{name: "other taints are kept", replicas: 3, machines: []string{"m1", "m2", "m3"},
			before: map[string]bool{"m1": true, "m2": true, "m3": false}, want: map[string]bool{"m1": true, "m2": true, "m3": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t).replicas(tc.replicas)
			for i, name := range tc.machines {
				f.machine(name, time.Duration(len(tc.machines)-i)*time.Hour)
				n := &corev1.Node{}
				n.Name = name
				n.Spec.Taints = []corev1.Taint{{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
				if tc.before[name] {
					n.Spec.Taints = append(n.Spec.Taints, controlPlaneTaint)
				}
				f.workloadObjs = append(f.workloadObjs, n)
				delete(f.members, name) // the Node above stands for the distribution's
			}
			e := f.build()
			if _, err := e.r.reconcileControlPlaneTaints(ctx, e.scope(ctx)); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				n := e.getNode(name)
				if tainted(n) != want {
					t.Errorf("Node %s tainted = %v, want %v (%v)", name, tainted(n), want, n.Spec.Taints)
				}
				if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "example.com/gpu" }) {
					t.Errorf("Node %s lost another taint: %v", name, n.Spec.Taints)
				}
			}
		})
	}
}
