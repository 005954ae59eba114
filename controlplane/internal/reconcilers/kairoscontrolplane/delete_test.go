package kairoscontrolplane

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func workerMachine(name string) *clusterv1.Machine {
	return &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec:       clusterv1.MachineSpec{ClusterName: clusterName},
	}
}

func machinePool(name, cluster string) *clusterv1.MachinePool {
	return &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Spec:       clusterv1.MachinePoolSpec{ClusterName: cluster},
	}
}

func TestReconcileDelete(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
		// wantDeleting are the control-plane Machines deleting afterwards; wantHooks those that keep the hook.
		wantDeleting  []string
		wantHooks     []string
		wantReason    string
		wantMessage   string
		wantFinalizer bool
		wantRequeue   time.Duration
	}{
		{name: "worker Machines first",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour)
				f.objs = append(f.objs, workerMachine("w1"), workerMachine("w2"))
			},
			wantHooks: []string{"m1", "m2"}, wantReason: controlplanev1.DeletingWaitingForWorkersReason,
			wantMessage:   "waiting for 2 worker Machine(s) and 0 MachinePool(s) to be deleted first: w1, w2",
			wantFinalizer: true, wantRequeue: requeueWhileBusy},
		{name: "MachinePools first",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.objs = append(f.objs, machinePool("pool", clusterName))
			},
			wantHooks: []string{"m1"}, wantReason: controlplanev1.DeletingWaitingForWorkersReason,
			wantMessage:   "waiting for 0 worker Machine(s) and 1 MachinePool(s)",
			wantFinalizer: true, wantRequeue: requeueWhileBusy},
		{name: "worker Machines and MachinePools",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.objs = append(f.objs, machinePool("pool", clusterName), workerMachine("w1"))
			},
			wantHooks: []string{"m1"}, wantReason: controlplanev1.DeletingWaitingForWorkersReason,
			wantMessage:   "waiting for 1 worker Machine(s) and 1 MachinePool(s) to be deleted first: w1",
			wantFinalizer: true, wantRequeue: requeueWhileBusy},
		{name: "other Clusters' workers and pools do not count",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				other := workerMachine("w-other")
				other.Labels[clusterv1.ClusterNameLabel] = "other"
				f.objs = append(f.objs, other, machinePool("pool-other", "other"))
			},
			wantDeleting: []string{"m1"}, wantReason: controlplanev1.DeletingWaitingForMachinesReason,
			wantMessage:   "deleting control-plane Machine(s) m1",
			wantFinalizer: true, wantRequeue: requeueWhileBusy},
		{name: "no workers: hooks removed and control-plane Machines deleted",
			setup: func(f *fixture) {
				f.machine("m1", time.Hour)
				f.machine("m2", time.Hour, deleting(time.Minute, clusterv1.MachineDeletingWaitingForPreTerminateHookReason))
				f.machine("m3", time.Hour, withoutHook())
			},
			wantDeleting: []string{"m1", "m2", "m3"}, wantReason: controlplanev1.DeletingWaitingForMachinesReason,
			wantMessage:   "deleting control-plane Machine(s) m1, m2, m3",
			wantFinalizer: true, wantRequeue: requeueWhileBusy},
		{name: "no Machines left: finalizer removed",
			wantReason: controlplanev1.DeletionCompletedReason},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
			f.kcp.Finalizers = []string{Finalizer}
			if tc.setup != nil {
				tc.setup(f)
			}
			e := f.build()
			s := e.scope(ctx)
			res, err := e.r.reconcileDelete(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if s.deletingReason != tc.wantReason || !strings.Contains(s.deletingMessage, tc.wantMessage) {
				t.Errorf("deleting = %s %q, want %s %q", s.deletingReason, s.deletingMessage, tc.wantReason, tc.wantMessage)
			}
			if got := controllerutil.ContainsFinalizer(s.kcp, Finalizer); got != tc.wantFinalizer {
				t.Errorf("finalizer kept = %v, want %v", got, tc.wantFinalizer)
			}
			var deletingNow, hooks []string
			for _, m := range e.listMachines() {
				if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
					if !m.DeletionTimestamp.IsZero() {
						t.Errorf("non-control-plane Machine %s deleted", m.Name)
					}
					continue
				}
				if !m.DeletionTimestamp.IsZero() {
					deletingNow = append(deletingNow, m.Name)
				}
				if hasHook(&m) {
					hooks = append(hooks, m.Name)
				}
			}
			if !slices.Equal(deletingNow, tc.wantDeleting) {
				t.Errorf("deleting Machines = %v, want %v", deletingNow, tc.wantDeleting)
			}
			if !slices.Equal(hooks, tc.wantHooks) {
				t.Errorf("Machines with the hook = %v, want %v", hooks, tc.wantHooks)
			}
			// The workload cluster goes as a whole: no member is asked to leave.
			for name := range f.members {
				if leave, _, _ := unstructured.NestedBool(e.getK0sMember(name).Object, "spec", "leave"); leave {
					t.Errorf("member %s asked to leave during cluster deletion", name)
				}
			}
		})
	}
}

// TestDeletingConditionHasAReasonWhenDeleteFails: when reconcileDelete fails before it knows
// what it waits for (listing Machines fails), updateStatus still sets the Deleting condition
// with a reason, which the API server requires.
func TestDeletingConditionHasAReasonWhenDeleteFails(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
	f.kcp.Finalizers = []string{Finalizer}
	calls := 0
	f.interceptor = &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*clusterv1.MachineList); ok {
			calls++
			if calls > 1 { // newScope's list passes, reconcileDelete's fails
				return errors.New("etcd timeout")
			}
		}
		return c.List(ctx, list, opts...)
	}}
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileDelete(ctx, s); err == nil {
		t.Fatal("no error")
	}
	updateStatus(ctx, s)
	if c := conditions.Get(f.kcp, controlplanev1.DeletingCondition); c == nil || c.Reason == "" {
		t.Errorf("Deleting = %+v, want a reason", c)
	}
}
