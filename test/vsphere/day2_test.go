package vsphere_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

// waitControlPlane bounds every wait for the control plane (or a worker) to settle: CAPV requeues
// (10 s while a VM has no address) and node boots, with room for a slow machine: a k3s
// control-plane node needed 5.9 minutes to run (retrying its start) at a load average of 33 on
// the 2-core machine, where it needs about 30 s when the machine is quiet.
const waitControlPlane = 10 * time.Minute

// newCAPVObject is an empty CAPV object of a kind, for reads: the test module cannot import
// CAPV's API types (CAPV pins Cluster API v1.13, see docs/capv-on-vcsim.md).
func newCAPVObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(vsphere.VSphereVMGVK.GroupVersion().WithKind(kind))
	return u
}

// controlPlaneMachines lists the cluster's control-plane Machines, oldest first.
func (c *capvCluster) controlPlaneMachines() ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := c.s.h.Client.List(c.ctx, list, client.InNamespace(c.ns), client.MatchingLabels{
		clusterv1.ClusterNameLabel: c.name, clusterv1.MachineControlPlaneLabel: "",
	}); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp)
	})
	return list.Items, nil
}

// settled waits until the control plane is exactly n Machines, each on its own VM that CAPV
// provisioned (provider ID vsphere://<the VM's BIOS UUID>), with a running node, a Node and a
// healthy etcd member, up to date; the workload cluster's etcd has exactly their n members; the
// VIP is held by one of their nodes; and the KairosControlPlane says so (Available, etcd healthy,
// nothing rolling out or scaling, every replica up to date). It returns the Machines and the
// guests of their VMs.
func (c *capvCluster) settled(n int, what string) ([]clusterv1.Machine, map[string]vsphere.GuestStatus) {
	c.t.Helper()
	return c.settledWithin(n, what, waitControlPlane)
}

// settledWithin is settled with another bound: a rollout replaces every Machine, one after the
// other (the k0s rollout of three took 7m19s at a load average of 30 to 40).
func (c *capvCluster) settledWithin(n int, what string, timeout time.Duration) ([]clusterv1.Machine, map[string]vsphere.GuestStatus) {
	c.t.Helper()
	start := time.Now()
	last := ""
	var machines []clusterv1.Machine
	var guests map[string]vsphere.GuestStatus
	framework.Eventually(c.t, timeout, func() error {
		if exited, err := c.s.manager.Exited(); exited {
			c.t.Fatalf("CAPV's manager exited: %v", err)
		}
		var err error
		if machines, err = c.controlPlaneMachines(); err != nil {
			return err
		}
		if err := c.s.h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.ns, Name: c.name + "-control-plane"}, c.kcp); err != nil {
			return err
		}
		guests = map[string]vsphere.GuestStatus{}
		nodes := map[*simnode.Node]bool{}
		nodeNames := map[string]bool{}
		var parts []string
		ready := 0
		for i := range machines {
			m := &machines[i]
			g, on := c.s.bridge.Guest(m.Spec.InfrastructureRef.Name)
			node := "VM not powered on"
			running := false
			if on && g.Node != nil {
				st := g.Node.Status()
				if st.Phase == simnode.PhaseRefused {
					c.t.Fatalf("the node of VM %s refused: %s: %s", m.Spec.InfrastructureRef.Name, st.Reason, st.Message)
				}
				node = fmt.Sprintf("%s/%s", st.Phase, st.Reason)
				running = st.Phase == simnode.PhaseRunning
			}
			deleting := ""
			if !m.DeletionTimestamp.IsZero() {
				deleting = " deleting"
			}
			parts = append(parts, fmt.Sprintf("%s%s: providerID=%q nodeRef=%q etcd=%s upToDate=%s node=%s", m.Name, deleting, m.Spec.ProviderID,
				m.Status.NodeRef.Name, condition(m, controlplanev1.MachineEtcdMemberHealthyCondition), condition(m, clusterv1.MachineUpToDateCondition), node))
			if deleting == "" && running && m.Spec.ProviderID == "vsphere://"+g.UUID && m.Status.NodeRef.IsDefined() &&
				conditions.IsTrue(m, controlplanev1.MachineEtcdMemberHealthyCondition) && conditions.IsTrue(m, clusterv1.MachineUpToDateCondition) {
				ready++
				guests[m.Name] = g
				nodes[g.Node] = true
				nodeNames[m.Status.NodeRef.Name] = true
			}
		}
		members := c.wc.EtcdMembers()
		var memberNodes []string
		for _, mem := range members {
			memberNodes = append(memberNodes, mem.NodeName)
		}
		sort.Strings(memberNodes)
		s := c.kcp.Status
		state := fmt.Sprintf("KCP Available=%s EtcdClusterHealthy=%s RollingOut=%s replicas=%d upToDate=%d; etcd members on %v; %s",
			condition(c.kcp, controlplanev1.AvailableCondition), condition(c.kcp, controlplanev1.EtcdClusterHealthyCondition),
			condition(c.kcp, controlplanev1.RollingOutCondition), ptr.Deref(s.Replicas, -1), ptr.Deref(s.UpToDateReplicas, -1),
			memberNodes, strings.Join(parts, "; "))
		// What holds the control plane back, when something does (preflight checks, a wait).
		for _, typ := range []string{controlplanev1.RollingOutCondition, controlplanev1.ScalingUpCondition, controlplanev1.ScalingDownCondition, controlplanev1.RemediatingCondition} {
			if cond := conditions.Get(c.kcp, typ); cond != nil && cond.Status == metav1.ConditionTrue && cond.Message != "" {
				state += fmt.Sprintf("; %s: %q", typ, cond.Message)
			}
		}
		if state != last {
			c.t.Logf("%5.1fs %s: %s", time.Since(start).Seconds(), what, state)
			last = state
		}
		if ready != n || len(machines) != n {
			return fmt.Errorf("%s: %d of %d control-plane Machines ready: %s", what, ready, n, state)
		}
		if len(members) != n {
			return fmt.Errorf("%s: %d etcd members, want %d: %s", what, len(members), n, state)
		}
		for _, mem := range members {
			if !nodeNames[mem.NodeName] {
				return fmt.Errorf("%s: etcd member %s runs on %s, which is no Machine's node: %s", what, mem.Name, mem.NodeName, state)
			}
		}
		if h := c.wc.VIPHolder(); h == nil || !nodes[h] {
			return fmt.Errorf("%s: the VIP %s is held by %v, no running control-plane Machine's node", what, c.vip, h)
		}
		for _, typ := range []string{controlplanev1.AvailableCondition, controlplanev1.EtcdClusterHealthyCondition, controlplanev1.MachinesUpToDateCondition} {
			if !conditions.IsTrue(c.kcp, typ) {
				return fmt.Errorf("%s: KairosControlPlane %s is not true: %s", what, typ, state)
			}
		}
		for _, typ := range []string{controlplanev1.RollingOutCondition, controlplanev1.ScalingUpCondition, controlplanev1.ScalingDownCondition} {
			if !conditions.IsFalse(c.kcp, typ) {
				return fmt.Errorf("%s: KairosControlPlane %s is not false: %s", what, typ, state)
			}
		}
		if ptr.Deref(s.Replicas, -1) != int32(n) || ptr.Deref(s.UpToDateReplicas, -1) != int32(n) || s.ObservedGeneration != c.kcp.Generation {
			return fmt.Errorf("%s: KairosControlPlane status not caught up: %s", what, state)
		}
		return nil
	})
	c.t.Logf("%s: %s: settled after %s", c.dist, what, time.Since(start).Round(time.Second))
	return machines, guests
}

// patchKCP merge-patches the KairosControlPlane's spec, without a resourceVersion (a status
// update of the control plane in between cannot make it a conflict).
func (c *capvCluster) patchKCP(spec string) {
	c.t.Helper()
	kcp := &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: c.name + "-control-plane"}}
	if err := c.s.h.Client.Patch(c.ctx, kcp, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`))); err != nil {
		c.t.Fatalf("patching the KairosControlPlane with %s: %v", spec, err)
	}
}

// scaleControlPlane scales the KairosControlPlane to replicas through CAPV. Up: each new
// Machine's VM is cloned and powered on by CAPV, its node joins etcd and the cluster through the
// VIP. Down: the Machines removed leave etcd (the remaining members are exactly those of the
// Machines left), CAPV destroys their VMs in vcsim and their nodes stop.
func (c *capvCluster) scaleControlPlane(replicas int) {
	c.t.Helper()
	before, guests := c.settled(int(ptr.Deref(c.kcp.Spec.Replicas, 1)), "before scaling")
	start := time.Now()
	c.patchKCP(fmt.Sprintf(`{"replicas":%d}`, replicas))
	after, _ := c.settled(replicas, fmt.Sprintf("scaling to %d", replicas))
	var removed []clusterv1.Machine
	for _, m := range before {
		if !slices.ContainsFunc(after, func(a clusterv1.Machine) bool { return a.UID == m.UID }) {
			removed = append(removed, m)
		}
	}
	if want := max(len(before)-replicas, 0); len(removed) != want {
		c.t.Errorf("scaling from %d to %d removed %d Machines, want %d", len(before), replicas, len(removed), want)
	}
	c.vmsGone(removed, guests)
	c.t.Logf("%s: the control plane scaled from %d to %d through CAPV in %s", c.dist, len(before), replicas, time.Since(start).Round(time.Second))
}

// vmsGone waits until the VMs of machines are destroyed in vcsim and their VSphereVMs gone, and
// the nodes they ran stopped.
func (c *capvCluster) vmsGone(machines []clusterv1.Machine, guests map[string]vsphere.GuestStatus) {
	c.t.Helper()
	framework.Eventually(c.t, waitControlPlane, func() error {
		for _, m := range machines {
			name := m.Spec.InfrastructureRef.Name
			if vm, _, err := c.s.vc.VM(c.ctx, name); err != nil || vm != nil {
				return fmt.Errorf("the VM %s of removed Machine %s is still in vcsim (%v)", name, m.Name, err)
			}
			if err := c.s.h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.ns, Name: name}, newCAPVObject("VSphereVM")); err == nil {
				return fmt.Errorf("the VSphereVM %s of removed Machine %s still exists", name, m.Name)
			} else if client.IgnoreNotFound(err) != nil {
				return err
			}
			if g, ok := guests[m.Name]; ok && g.Node != nil {
				if st := g.Node.Status(); st.Phase != simnode.PhaseStopped {
					return fmt.Errorf("the node of removed Machine %s is %s", m.Name, st.Phase)
				}
			}
		}
		return nil
	})
	var names []string
	for _, m := range machines {
		names = append(names, m.Spec.InfrastructureRef.Name)
	}
	if len(names) > 0 {
		c.t.Logf("%s: CAPV destroyed the VMs %v in vcsim; their nodes stopped", c.dist, names)
	}
}

// remediateVMDeletedInVCenter: an administrator deletes the VM of the control-plane node that
// holds the VIP in vCenter (powered off, then destroyed, as vSphere Client's "Delete from Disk").
// Nothing tells Cluster API: its node stops, the Node goes Unknown once its lease lapses (the
// simulated node lifecycle controller), the MachineHealthCheck the test adds marks the Machine
// unhealthy, and the KairosControlPlane remediates it: it removes the dead etcd member, deletes
// the Machine (CAPV finds no VM for its VSphereVM and lets it go,
// CAPV/controllers/vspherevm_controller.go reconcileDelete waits for VirtualMachineStateNotFound)
// and creates a replacement through CAPV. The VIP moves to a surviving node meanwhile.
//
// The flavor ships no MachineHealthCheck (its timeouts are a site's choice); the test's has short
// ones so that remediation starts within a minute of the VM's deletion.
func (c *capvCluster) remediateVMDeletedInVCenter() {
	c.t.Helper()
	machines, guests := c.settled(3, "before deleting a VM in vCenter")
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: c.name + "-control-plane"},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: c.name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](10)},
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](10)},
			}},
		},
	}
	if err := c.s.h.Client.Create(c.ctx, mhc); err != nil {
		c.t.Fatal(err)
	}
	framework.Eventually(c.t, 2*time.Minute, func() error {
		if err := c.s.h.Client.Get(c.ctx, client.ObjectKeyFromObject(mhc), mhc); err != nil {
			return err
		}
		if ptr.Deref(mhc.Status.CurrentHealthy, 0) != 3 {
			return fmt.Errorf("MachineHealthCheck %s: %d healthy of %d", mhc.Name, ptr.Deref(mhc.Status.CurrentHealthy, 0), ptr.Deref(mhc.Status.ExpectedMachines, 0))
		}
		return nil
	})

	holder := c.wc.VIPHolder()
	var victim *clusterv1.Machine
	for i := range machines {
		if guests[machines[i].Name].Node == holder {
			victim = &machines[i]
		}
	}
	if victim == nil {
		c.t.Fatalf("no control-plane Machine's node holds the VIP (%v)", holder)
	}
	vmName := victim.Spec.InfrastructureRef.Name
	start := time.Now()
	if err := c.s.vc.DestroyVM(c.ctx, vmName); err != nil {
		c.t.Fatal(err)
	}
	framework.Eventually(c.t, time.Minute, func() error {
		if _, on := c.s.bridge.Guest(vmName); on {
			return fmt.Errorf("the bridge still plays VM %s", vmName)
		}
		if st := holder.Status(); st.Phase != simnode.PhaseStopped {
			return fmt.Errorf("the node of VM %s is %s", vmName, st.Phase)
		}
		return nil
	})
	c.t.Logf("%s: VM %s (Machine %s, the VIP holder) destroyed in vCenter: its node stopped after %s", c.dist, vmName, victim.Name, time.Since(start).Round(100*time.Millisecond))

	framework.Eventually(c.t, waitControlPlane, func() error {
		if err := c.s.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), c.kcp); err != nil {
			return err
		}
		if c.kcp.Status.LastRemediation.Machine != victim.Name {
			m := &clusterv1.Machine{}
			_ = c.s.h.Client.Get(c.ctx, client.ObjectKeyFromObject(victim), m)
			return fmt.Errorf("lastRemediation %+v; Machine %s HealthCheckSucceeded=%s OwnerRemediated=%s; KCP Remediating=%s",
				c.kcp.Status.LastRemediation, victim.Name, condition(m, clusterv1.MachineHealthCheckSucceededCondition),
				condition(m, clusterv1.MachineOwnerRemediatedCondition), condition(c.kcp, controlplanev1.RemediatingCondition))
		}
		return nil
	})
	c.t.Logf("%s: the KairosControlPlane remediated Machine %s %s after the VM's deletion", c.dist, victim.Name, time.Since(start).Round(time.Second))

	after, afterGuests := c.settled(3, "remediating the Machine of the deleted VM")
	replacements := 0
	for _, m := range after {
		if m.UID == victim.UID {
			c.t.Errorf("Machine %s of the deleted VM is still there", victim.Name)
		}
		if _, ok := m.Annotations[controlplanev1.RemediationForAnnotation]; ok {
			replacements++
		}
		if afterGuests[m.Name].Node == holder {
			c.t.Errorf("Machine %s runs on the node of the deleted VM", m.Name)
		}
	}
	if replacements != 1 {
		c.t.Errorf("%d Machines record the remediation they are part of, want the one replacement", replacements)
	}
	// CAPV did not clone the deleted VM again: its VSphereVM went with the Machine.
	c.vmsGone([]clusterv1.Machine{*victim}, nil)
	framework.Eventually(c.t, time.Minute, func() error {
		return harnessCondition(c, controlplanev1.RemediatingCondition, metav1.ConditionFalse)
	})
	c.t.Logf("%s: a control-plane VM deleted in vCenter was remediated through CAPV in %s; the VIP moved to %s", c.dist,
		time.Since(start).Round(time.Second), c.wc.VIPHolder())
}

// harnessCondition reads the KairosControlPlane and checks one of its conditions' status.
func harnessCondition(c *capvCluster, typ string, status metav1.ConditionStatus) error {
	if err := c.s.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), c.kcp); err != nil {
		return err
	}
	if got := conditions.Get(c.kcp, typ); got == nil || got.Status != status {
		return fmt.Errorf("KairosControlPlane %s is %s, want %s", typ, condition(c.kcp, typ), status)
	}
	return nil
}

// nextMemoryMiB is the memory of the VMs of the rolling upgrade's new VSphereMachineTemplate.
const nextMemoryMiB = 8192

// rollOutNewTemplate: a rolling upgrade through a new VSphereMachineTemplate, as a user moves the
// control plane to the VM template of a newer Kairos release with more memory: the
// KairosControlPlane's machineTemplate names the new template, and every control-plane Machine is
// replaced one at a time (maxSurge 1, the flavor's default: never more than 4 Machines, never
// fewer than 3 that are not being deleted), CAPV cloning each new VM from the new VM template
// with the new memory and destroying each old one. The KairosControlPlane stays Available
// throughout: its API served and an etcd quorum read succeeding at every status it wrote.
func (c *capvCluster) rollOutNewTemplate() {
	c.t.Helper()
	before, beforeGuests := c.settled(3, "before the rolling upgrade")
	oldName := c.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name
	old := newCAPVObject("VSphereMachineTemplate")
	if err := c.s.h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.ns, Name: oldName}, old); err != nil {
		c.t.Fatal(err)
	}
	spec, _, err := unstructured.NestedMap(old.Object, "spec")
	if err != nil {
		c.t.Fatal(err)
	}
	oldMemory, _, _ := unstructured.NestedInt64(spec, "template", "spec", "memoryMiB")
	if err := unstructured.SetNestedField(spec, vsphere.NextTemplateName, "template", "spec", "template"); err != nil {
		c.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(spec, int64(nextMemoryMiB), "template", "spec", "memoryMiB"); err != nil {
		c.t.Fatal(err)
	}
	next := newCAPVObject("VSphereMachineTemplate")
	next.SetNamespace(c.ns)
	next.SetName(oldName + "-next")
	next.Object["spec"] = spec
	if err := c.s.h.Client.Create(c.ctx, next); err != nil {
		c.t.Fatal(err)
	}
	for _, m := range before {
		if _, vm, err := c.s.vc.VM(c.ctx, m.Spec.InfrastructureRef.Name); err != nil || vm == nil || int64(vm.Config.Hardware.MemoryMB) != oldMemory {
			c.t.Fatalf("VM %s before the upgrade: %v, %v; want %d MiB, the flavor's", m.Spec.InfrastructureRef.Name, vm, err, oldMemory)
		}
	}

	w := c.watchRollout()
	start := time.Now()
	c.patchKCP(`{"machineTemplate":{"spec":{"infrastructureRef":{"name":"` + next.GetName() + `"}}}}`)
	after, _ := c.settledWithin(3, "rolling out "+next.GetName(), 3*waitControlPlane)
	most, fewestActive, unavailable, etcdUnhealthy := w.result()
	c.t.Logf("%s: rolled out to VSphereMachineTemplate %s in %s (at most %d Machines, at least %d not deleting; %d statuses with etcd not healthy)",
		c.dist, next.GetName(), time.Since(start).Round(time.Second), most, fewestActive, len(etcdUnhealthy))
	if most > 4 || fewestActive < 3 {
		c.t.Errorf("the rollout had up to %d Machines and down to %d not deleting, want at most 4 and at least 3 (one at a time)", most, fewestActive)
	}
	if len(unavailable) > 0 {
		c.t.Errorf("the KairosControlPlane was not Available during the rollout: %s", strings.Join(unavailable, "; "))
	}
	// etcd kept its quorum: Available (above) says a quorum read succeeded at every status the
	// control plane wrote. EtcdClusterHealthy is stricter and goes False for moments in every
	// rollout: a member added for a new Machine before it starts or before its Machine has an
	// address, an old member that stopped on leaving before its Machine is marked deleting, or a
	// member slower to answer than the health check waits on a loaded machine (seen at a load
	// average of 35). Those statuses are logged; settled() requires it True at the end, with
	// exactly the new Machines' members.
	for _, st := range etcdUnhealthy {
		c.t.Logf("%s: EtcdClusterHealthy during the rollout: %s", c.dist, st)
	}
	for _, m := range after {
		if slices.ContainsFunc(before, func(b clusterv1.Machine) bool { return b.UID == m.UID }) {
			c.t.Errorf("Machine %s was not replaced", m.Name)
		}
		vsm := newCAPVObject("VSphereMachine")
		if err := c.s.h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.ns, Name: m.Spec.InfrastructureRef.Name}, vsm); err != nil {
			c.t.Fatal(err)
		}
		if from := vsm.GetAnnotations()[clusterv1.TemplateClonedFromNameAnnotation]; from != next.GetName() {
			c.t.Errorf("VSphereMachine %s was cloned from %q, want %s", vsm.GetName(), from, next.GetName())
		}
		vsvm := newCAPVObject("VSphereVM")
		if err := c.s.h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.ns, Name: m.Spec.InfrastructureRef.Name}, vsvm); err != nil {
			c.t.Fatal(err)
		}
		if tpl, _, _ := unstructured.NestedString(vsvm.Object, "spec", "template"); tpl != vsphere.NextTemplateName {
			c.t.Errorf("VSphereVM %s clones %q, want %s", vsvm.GetName(), tpl, vsphere.NextTemplateName)
		}
		if _, vm, err := c.s.vc.VM(c.ctx, m.Spec.InfrastructureRef.Name); err != nil || vm == nil || vm.Config.Hardware.MemoryMB != nextMemoryMiB {
			c.t.Errorf("VM %s after the upgrade: %v, %v; want %d MiB", m.Spec.InfrastructureRef.Name, vm, err, nextMemoryMiB)
		}
	}
	c.vmsGone(before, beforeGuests)
}

// rolloutWatch records, from every change the API server reports, the most control-plane
// Machines at once, the fewest not being deleted, and every KairosControlPlane status that was
// not Available or not etcd-healthy.
type rolloutWatch struct {
	mu                   sync.Mutex
	most, fewestActive   int
	unavailable, etcdBad []string
	// updatingSeen names the Machines seen being updated in place.
	updatingSeen map[string]bool
	stop         context.CancelFunc
}

// updating tells whether the Machine was seen being updated in place, by any of the marks the
// control plane and Cluster API's Machine controller put on it.
func (w *rolloutWatch) updating(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updatingSeen[name]
}

func (c *capvCluster) watchRollout() *rolloutWatch {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.ctx)
	w := &rolloutWatch{fewestActive: 1 << 30, stop: cancel, updatingSeen: map[string]bool{}}
	if err := c.s.h.Observe(ctx, &clusterv1.Machine{}, func(objects []client.Object) {
		all, active := 0, 0
		for _, o := range objects {
			m := o.(*clusterv1.Machine)
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; m.Namespace != c.ns || !cp {
				continue
			}
			all++
			if m.DeletionTimestamp.IsZero() {
				active++
			}
			_, started := m.Annotations[clusterv1.UpdateInProgressAnnotation]
			if started || conditions.IsTrue(m, clusterv1.MachineUpdatingCondition) {
				w.mu.Lock()
				w.updatingSeen[m.Name] = true
				w.mu.Unlock()
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.most, w.fewestActive = max(w.most, all), min(w.fewestActive, active)
	}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.s.h.Observe(ctx, &controlplanev1.KairosControlPlane{}, func(objects []client.Object) {
		for _, o := range objects {
			kcp := o.(*controlplanev1.KairosControlPlane)
			if kcp.Namespace != c.ns {
				continue
			}
			w.mu.Lock()
			if cond := conditions.Get(kcp, controlplanev1.AvailableCondition); cond == nil || cond.Status != metav1.ConditionTrue {
				w.unavailable = append(w.unavailable, fmt.Sprintf("generation %d: %+v", kcp.Generation, cond))
			}
			if cond := conditions.Get(kcp, controlplanev1.EtcdClusterHealthyCondition); cond == nil || cond.Status != metav1.ConditionTrue {
				w.etcdBad = append(w.etcdBad, fmt.Sprintf("generation %d: %+v", kcp.Generation, cond))
			}
			w.mu.Unlock()
		}
	}); err != nil {
		c.t.Fatal(err)
	}
	return w
}

func (w *rolloutWatch) result() (most, fewestActive int, unavailable, etcdUnhealthy []string) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.fewestActive, slices.Compact(w.unavailable), slices.Compact(w.etcdBad)
}

// deleteCluster deletes the Cluster as a user does (kubectl delete cluster): CAPV powers off and
// destroys every VM of the cluster in vcsim, every node the cluster ever ran stops, and nothing
// of the cluster is left in the management cluster.
func (c *capvCluster) deleteCluster() {
	c.t.Helper()
	cl := c.s.h.Client
	if err := cl.Delete(c.ctx, c.cluster); err != nil {
		c.t.Fatal(err)
	}
	start := time.Now()
	var nodes []*simnode.Node
	framework.Eventually(c.t, waitControlPlane, func() error {
		if err := cl.Get(c.ctx, client.ObjectKeyFromObject(c.cluster), &clusterv1.Cluster{}); err == nil {
			return fmt.Errorf("the Cluster still exists")
		} else if client.IgnoreNotFound(err) != nil {
			return err
		}
		vms, err := c.s.vc.VMNames(c.ctx, c.name+"-*")
		if err != nil {
			return err
		}
		if len(vms) > 0 {
			return fmt.Errorf("%d VMs of the cluster still exist in vcsim: %v", len(vms), vms)
		}
		nodes = c.s.reg.NodesOf(c.wc.Endpoint())
		for _, n := range nodes {
			if st := n.Status(); st.Phase != simnode.PhaseStopped {
				return fmt.Errorf("%s is %s", n, st.Phase)
			}
		}
		return nil
	})
	// 1 control-plane node, 1 worker, 2 scaled up, 1 replacement, 3 rolled out.
	if len(nodes) != 8 {
		c.t.Errorf("%d nodes ran for the cluster, want 8", len(nodes))
	}
	if err := framework.Poll(time.Minute, func() error { return c.leftovers() }); err != nil {
		c.t.Errorf("%v\ngarbage collector: %s", err, c.s.h.GarbageCollectorState())
	}
	c.t.Logf("%s: Cluster deleted after %s: CAPV destroyed its VMs in vcsim, the %d nodes it ran stopped, nothing of it is left", c.dist,
		time.Since(start).Round(time.Second), len(nodes))
}

// leftovers lists what of the cluster is left in its namespace: every object of Cluster API, the
// Kairos providers and CAPV, and every Secret.
func (c *capvCluster) leftovers() error {
	lists := []client.ObjectList{
		&clusterv1.MachineList{}, &clusterv1.MachineSetList{}, &clusterv1.MachineDeploymentList{}, &clusterv1.MachineHealthCheckList{},
		&controlplanev1.KairosControlPlaneList{}, &bootstrapv1.KairosConfigList{}, &bootstrapv1.KairosConfigTemplateList{},
		&corev1.SecretList{},
	}
	for _, kind := range []string{"VSphereCluster", "VSphereMachine", "VSphereVM", "VSphereMachineTemplate"} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(vsphere.VSphereVMGVK.GroupVersion().WithKind(kind + "List"))
		lists = append(lists, l)
	}
	var left []string
	for _, list := range lists {
		if err := c.s.h.Client.List(c.ctx, list, client.InNamespace(c.ns)); err != nil {
			return err
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			var owners []string
			for _, ref := range obj.GetOwnerReferences() {
				owners = append(owners, ref.Kind+"/"+ref.Name)
			}
			kind := o.GetObjectKind().GroupVersionKind().Kind
			if kind == "" {
				kind = fmt.Sprintf("%T", o)
			}
			left = append(left, fmt.Sprintf("%s %s (owners %v, deleting %v)", kind, obj.GetName(), owners, !obj.GetDeletionTimestamp().IsZero()))
			return nil
		}); err != nil {
			return err
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind in %s: %s", c.ns, strings.Join(left, ", "))
	}
	return nil
}
