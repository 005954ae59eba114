package vsphere_test

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// inPlaceVersion is what the in-place upgrade moves the single control-plane node to: a minor
// version up, with the Kairos image that ships it.
const inPlaceVersion = "v1.37.0"

// upgradeInPlace: the single control-plane node moves to the next minor version and its Kairos
// image in place, through Cluster API's in-place update hooks (RuntimeSDK, InPlaceUpdates), the
// Kairos update extension and the Kairos operator in the workload cluster, exactly as on the
// simulated infrastructure (test/lifecycle/inplace_test.go), but on a VM that CAPV manages: the
// Machine, its VSphereMachine and VSphereVM, the VM in vcsim (same BIOS UUID, never powered off:
// the node reboots inside the guest, as kairos-agent upgrade does), the Node and the etcd member
// all stay; the desired VSphereMachine the control plane writes (a clone of the unchanged
// VSphereMachineTemplate over what CAPV set since) changes nothing CAPV acts on.
//
// The user opts in as the lifecycle scenarios do: the namespace is labelled for the extension's
// ExtensionConfig, the Kairos operator runs in the workload cluster, and the rollout may not
// surge (maxSurge 0: with one replica, a rollout that may not create a Machine can only update
// in place; the control plane decides for in-place only where it would delete an outdated one).
func (c *capvCluster) upgradeInPlace() {
	c.t.Helper()
	before, guests := c.settled(1, "before the in-place upgrade")
	m := before[0]
	guest := guests[m.Name]
	if err := c.s.h.OptIntoInPlaceUpdates(c.ctx, c.ns); err != nil {
		c.t.Fatal(err)
	}
	if err := c.wc.InstallKairosOperator(c.ctx); err != nil {
		c.t.Fatal(err)
	}
	wl := c.wc.AdminClient()
	nodeBefore := &corev1.Node{}
	if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, nodeBefore); err != nil {
		c.t.Fatal(err)
	}
	members := c.wc.EtcdMembers()
	image := simnode.KairosImage(render.Distribution(c.dist), inPlaceVersion)

	w := c.watchRollout()
	start := time.Now()
	c.patchKCP(fmt.Sprintf(`{"version":%q,"kairosConfigSpec":{"image":%q},"rollout":{"strategy":{"rollingUpdate":{"maxSurge":0}}}}`, inPlaceVersion, image))
	after, afterGuests := c.settled(1, "upgrading in place to "+inPlaceVersion)
	most, fewestActive, _, _ := w.result()
	a := after[0]
	c.t.Logf("%s: upgraded in place to %s through CAPV's VM in %s", c.dist, inPlaceVersion, time.Since(start).Round(time.Second))
	if a.UID != m.UID || most != 1 || fewestActive != 1 {
		c.t.Errorf("Machines were replaced: %s (uid %s) before, %s (uid %s) after; up to %d Machines, down to %d not deleting", m.Name, m.UID, a.Name, a.UID, most, fewestActive)
	}
	if a.Spec.Version != inPlaceVersion || !conditions.IsTrue(&a, clusterv1.MachineUpToDateCondition) {
		c.t.Errorf("Machine %s after the update: version %s, UpToDate %s", a.Name, a.Spec.Version, condition(&a, clusterv1.MachineUpToDateCondition))
	}
	if !w.updating(m.Name) {
		c.t.Errorf("Machine %s was never marked as being updated in place", m.Name)
	}
	for _, an := range []string{clusterv1.UpdateInProgressAnnotation, "runtime.cluster.x-k8s.io/pending-hooks"} {
		if _, ok := a.Annotations[an]; ok {
			c.t.Errorf("Machine %s still has annotation %s", a.Name, an)
		}
	}
	// The same VM, powered on all along: the same guest (the bridge boots a new node at each
	// power-on), the same BIOS UUID and provider ID.
	if g := afterGuests[a.Name]; g.Node != guest.Node || g.UUID != guest.UUID || a.Spec.ProviderID != m.Spec.ProviderID {
		c.t.Errorf("the VM of %s after the update: node %v (was %v), BIOS UUID %s (was %s), provider ID %q (was %q)", a.Name, g.Node, guest.Node, g.UUID, guest.UUID, a.Spec.ProviderID, m.Spec.ProviderID)
	}
	if running := guest.Node.RunningImage(); running != image {
		c.t.Errorf("the node runs image %s, want %s", running, image)
	}
	nodeAfter := &corev1.Node{}
	if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, nodeAfter); err != nil {
		c.t.Fatal(err)
	}
	if nodeAfter.UID != nodeBefore.UID || nodeAfter.Spec.ProviderID != nodeBefore.Spec.ProviderID ||
		!strings.HasPrefix(nodeAfter.Status.NodeInfo.KubeletVersion, inPlaceVersion+"+") {
		c.t.Errorf("Node after the update: uid %s (was %s), providerID %q (was %q), kubelet %s (want %s+<build>, as k0s and k3s spell it)", nodeAfter.UID, nodeBefore.UID,
			nodeAfter.Spec.ProviderID, nodeBefore.Spec.ProviderID, nodeAfter.Status.NodeInfo.KubeletVersion, inPlaceVersion)
	}
	if now := c.wc.EtcdMembers(); len(now) != 1 || len(members) != 1 || now[0].MemberID != members[0].MemberID {
		c.t.Errorf("etcd members after the update %+v, before %+v", now, members)
	}
	if vm, props, err := c.s.vc.VM(c.ctx, m.Spec.InfrastructureRef.Name); err != nil || vm == nil || props.Config.Uuid != guest.UUID {
		c.t.Errorf("the VM %s in vcsim after the update: %v, %v", m.Spec.InfrastructureRef.Name, vm, err)
	}
}
