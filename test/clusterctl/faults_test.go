package clusterctl

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestControlPlaneManagerKilledDuringScaleUp kills the control-plane manager (a process of this
// tree's release, as clusterctl installed it) with SIGKILL while it scales a running control
// plane from 3 to 5 Machines, at the moment it has created the KairosConfig of a new Machine,
// and starts it again, as a Deployment would. The control plane must end with exactly five
// Machines, each with its own etcd member and no member without a Machine, and with no
// KairosConfig or infrastructure machine that the killed manager created left without its
// Machine.
//
// The moment is caught with a watch on KairosConfigs: the manager is frozen (SIGSTOP) as soon
// as a new one appears, and killed then; whether its Machine existed by then is logged. Either
// way the invariants must hold.
func TestControlPlaneManagerKilledDuringScaleUp(t *testing.T) {
	slots.Parallel(t)
	x := startMixed(t, "kill", newVersion, newVersion)
	ctx := framework.Context(t)
	x.createCluster(t, 3)
	start := time.Now()
	x.settled(t, 3)
	t.Logf("3 control-plane Machines ready in %s", time.Since(start).Round(time.Second))

	wc, err := client.NewWithWatch(x.Env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &bootstrapv1.KairosConfigList{}, client.InNamespace(x.ns),
		client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: x.kcp.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	known := map[string]bool{}
	for _, m := range x.settled(t, 3) {
		known[m.Spec.Bootstrap.ConfigRef.Name] = true
	}

	// Every Machine the scale-up creates, as the API server reports it: a surplus Machine that
	// is created and removed again fails the test even though the end state looks right.
	machinesSeen := watchMachines(ctx, t, wc, x.ns, x.kcp.Name)

	x.updateControlPlane(t, func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](5) })
	cp := x.managers[controlPlaneProvider.Name]
	var victim string
	deadline := time.After(2 * time.Minute)
	for victim == "" {
		select {
		case ev := <-w.ResultChan():
			config, ok := ev.Object.(*bootstrapv1.KairosConfig)
			if ev.Type != watch.Added || !ok || known[config.Name] {
				continue
			}
			if err := syscall.Kill(cp.Pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			victim = config.Name
		case <-deadline:
			t.Fatal("the control plane created no KairosConfig for the scale-up within 2m")
		}
	}
	err = x.Client.Get(ctx, client.ObjectKey{Namespace: x.ns, Name: victim}, &clusterv1.Machine{})
	machineExisted := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := syscall.Kill(cp.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("control-plane manager killed after it created KairosConfig %s (its Machine existed: %v)", victim, machineExisted)
	cp.stop(t) // reaps the process; a SIGKILL is how it was meant to end

	x.managers[controlPlaneProvider.Name] = x.startManagerUntil(t, x.owner, controlPlaneProvider)
	start = time.Now()
	machines := x.settled(t, 5)
	t.Logf("5 control-plane Machines ready %s after the restart", time.Since(start).Round(time.Second))

	created, peak := machinesSeen()
	for _, name := range created {
		if !slices.ContainsFunc(machines, func(m clusterv1.Machine) bool { return m.Name == name }) {
			t.Errorf("Machine %s was created during the scale-up and is gone: a surplus Machine (created: %v)", name, created)
		}
	}
	if peak > 5 {
		t.Errorf("up to %d control-plane Machines at once during the scale-up to 5", peak)
	}

	// One etcd member per Machine, none without one.
	nodes := map[string]bool{}
	for _, m := range machines {
		nodes[m.Status.NodeRef.Name] = true
	}
	framework.Eventually(t, time.Minute, func() error {
		members := x.cluster.SimCluster(ctx).EtcdMembers()
		if len(members) != len(machines) {
			return fmt.Errorf("%d etcd members %+v for %d Machines", len(members), members, len(machines))
		}
		for _, m := range members {
			if !nodes[m.NodeName] {
				return fmt.Errorf("etcd member %s of node %s belongs to no Machine", m.Name, m.NodeName)
			}
		}
		return nil
	})
	// Nothing the killed manager created stays without its Machine.
	framework.Eventually(t, time.Minute, func() error {
		return orphansOf(ctx, x.Client, x.ns, x.kcp.Name, machines)
	})

	if err := x.cluster.Delete(ctx, harness.DefaultDeleteTimeout); err != nil {
		t.Fatalf("deleting the cluster: %v", err)
	}
}

// orphansOf fails when a KairosConfig or infrastructure machine of the control plane has no
// Machine of its name.
func orphansOf(ctx context.Context, c client.Client, ns, kcp string, machines []clusterv1.Machine) error {
	var names []string
	for _, m := range machines {
		names = append(names, m.Name)
	}
	configs := &bootstrapv1.KairosConfigList{}
	infras := &infrav1.KairosSimMachineList{}
	for _, l := range []client.ObjectList{configs, infras} {
		if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: kcp}); err != nil {
			return err
		}
	}
	var orphans []string
	for _, o := range configs.Items {
		if !slices.Contains(names, o.Name) {
			orphans = append(orphans, "KairosConfig "+o.Name)
		}
	}
	for _, o := range infras.Items {
		if !slices.Contains(names, o.Name) {
			orphans = append(orphans, "KairosSimMachine "+o.Name)
		}
	}
	if len(orphans) > 0 {
		return fmt.Errorf("objects without their Machine (Machines %v): %v", names, orphans)
	}
	return nil
}

// watchMachines records the control plane's Machines from a watch: every Machine ever added and
// the most that existed at once. The returned function stops the watch and reports them; it
// fails the test if the watch ended early (events could have been missed).
func watchMachines(ctx context.Context, t *testing.T, wc client.WithWatch, ns, kcp string) func() (created []string, peak int) {
	t.Helper()
	w, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(ns), client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: kcp})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		seen       []string
		live       = map[string]bool{}
		most       int
		endedEarly bool
		stopping   = make(chan struct{})
		done       = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stopping:
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					mu.Lock()
					endedEarly = true
					mu.Unlock()
					return
				}
				m, isMachine := ev.Object.(*clusterv1.Machine)
				if !isMachine {
					continue
				}
				mu.Lock()
				switch ev.Type {
				case watch.Added:
					if !live[m.Name] && !slices.Contains(seen, m.Name) {
						seen = append(seen, m.Name)
					}
					live[m.Name] = true
				case watch.Deleted:
					delete(live, m.Name)
				}
				most = max(most, len(live))
				mu.Unlock()
			}
		}
	}()
	return func() ([]string, int) {
		close(stopping)
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if endedEarly {
			t.Error("the Machine watch ended before the scale-up did: Machines may have been missed")
		}
		return slices.Clone(seen), most
	}
}
