package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// inPlaceVersion is what the in-place scenarios upgrade to: a minor version up, as a Kairos user
// moves a site's single node.
const inPlaceVersion = "v1.37.0"

// kairosImage is the Kairos image of the simulation that ships a distribution at a version.
func kairosImage(dist bootstrapv1.Distribution, v string) string {
	return simnode.KairosImage(render.Distribution(dist), v)
}

// TestSingleNodeUpgradesInPlace (issue 20, a): a single control-plane node with no workers and
// no room to surge (maxSurge 0) moves from one minor version and Kairos image to the next in
// place, through Cluster API's in-place update hooks, the Kairos extension and the Kairos
// operator of the workload cluster: no Machine is ever created or deleted; the Node, its provider
// ID and the etcd member stay; what was written to the cluster before is still there; the
// Machine reports Updating while it runs and is UpToDate after.
func TestSingleNodeUpgradesInPlace(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			c := newControlPlaneCluster(t, dist, cpOptions{inPlace: true, replicas: 1, version: version, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Image = kairosImage(dist, version)
				s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
			}})
			before := c.waitSettled(1, version, waitScale)[0]
			sim := c.simCluster()
			if err := sim.InstallKairosOperator(c.ctx); err != nil {
				t.Fatal(err)
			}
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := wl.Create(c.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "written-before"}}); err != nil {
				t.Fatal(err)
			}
			nodeBefore := &corev1.Node{}
			if err := wl.Get(c.ctx, client.ObjectKey{Name: before.Status.NodeRef.Name}, nodeBefore); err != nil {
				t.Fatal(err)
			}
			members := sim.EtcdMembers()

			w := c.watchMachineCount()
			updating := c.watchUpdatingAtOnce()
			start := time.Now()
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Version = inPlaceVersion
				s.KairosConfigSpec.Image = kairosImage(dist, inPlaceVersion)
			})
			after := c.waitSettled(1, inPlaceVersion, 2*waitScale)[0]
			most, fewest := w.result()
			t.Logf("upgraded in place to %s after %s", inPlaceVersion, time.Since(start).Round(time.Second))

			if after.UID != before.UID || most != 1 || fewest != 1 {
				t.Errorf("Machines were replaced: %s (uid %s) before, %s (uid %s) after, up to %d and down to %d active; at the peak: %s",
					before.Name, before.UID, after.Name, after.UID, most, fewest, w.peakMachines())
			}
			if !updating.reportedUpdating(after.Name) {
				t.Errorf("Machine %s never reported %s=True", after.Name, clusterv1.MachineUpdatingCondition)
			}
			if !conditions.IsTrue(&after, clusterv1.MachineUpToDateCondition) || conditions.IsTrue(&after, clusterv1.MachineUpdatingCondition) {
				t.Errorf("Machine %s after the update: UpToDate %+v, Updating %+v", after.Name,
					conditions.Get(&after, clusterv1.MachineUpToDateCondition), conditions.Get(&after, clusterv1.MachineUpdatingCondition))
			}
			for _, a := range []string{clusterv1.UpdateInProgressAnnotation, "runtime.cluster.x-k8s.io/pending-hooks"} {
				if _, ok := after.Annotations[a]; ok {
					t.Errorf("Machine %s still has annotation %s", after.Name, a)
				}
			}
			nodeAfter := &corev1.Node{}
			if err := wl.Get(c.ctx, client.ObjectKey{Name: before.Status.NodeRef.Name}, nodeAfter); err != nil {
				t.Fatal(err)
			}
			if nodeAfter.UID != nodeBefore.UID || nodeAfter.Spec.ProviderID != nodeBefore.Spec.ProviderID || after.Spec.ProviderID != before.Spec.ProviderID {
				t.Errorf("Node after the update: uid %s (was %s), providerID %q (was %q), Machine providerID %q (was %q)",
					nodeAfter.UID, nodeBefore.UID, nodeAfter.Spec.ProviderID, nodeBefore.Spec.ProviderID, after.Spec.ProviderID, before.Spec.ProviderID)
			}
			if m := sim.EtcdMembers(); len(m) != 1 || len(members) != 1 || m[0].MemberID != members[0].MemberID {
				t.Errorf("etcd members after the update %+v, before %+v", m, members)
			}
			if running := c.nodeOf(after).RunningImage(); running != kairosImage(dist, inPlaceVersion) {
				t.Errorf("the node runs image %s, want %s", running, kairosImage(dist, inPlaceVersion))
			}
			if err := wl.Get(c.ctx, client.ObjectKey{Namespace: "default", Name: "written-before"}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("the object written before the update: %v", err)
			}

			// (d) on the same cluster (a cluster start costs more than the whole scenario).
			brokenUpdateFallsBackAndCorrectionResumes(t, c, dist, after, nodeAfter, members)
		})
	}
}

// correctedVersion is what the failed update of (d) asks for, first with an image that does
// not boot, then with a rebuilt image of the same Kubernetes version.
const correctedVersion = "v1.37.1"

// brokenUpdateFallsBackAndCorrectionResumes (issue 20, d): the single node of (a), at v1.37.0,
// is updated in place to a v1.37.1 image that does not boot. Boot assessment brings the node back
// to the v1.37.0 image; the Kairos operator reports the upgrade done all the same (as v0.1.3
// does: the node ran again after its reboot), and the extension finds the fallback on the Node
// (a new boot with the old kubelet version, the node labeler's boot state passive): the Machine
// reports InPlaceUpdateFailed and the control plane shows what the Node says; no Machine is
// created or deleted. Then the spec is corrected (a rebuilt
// v1.37.1 image that boots) and the same update resumes and completes on the same Machine, Node
// and etcd member. The control plane is Available again on the fallback image and after the
// correction; while the only node reboots it is not (see the end).
func brokenUpdateFallsBackAndCorrectionResumes(t *testing.T, c *cpCluster, dist bootstrapv1.Distribution, before clusterv1.Machine, nodeBefore *corev1.Node, members []simnode.EtcdMember) {
	t.Helper()
	wl, err := c.WorkloadClient(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	broken := kairosImage(dist, correctedVersion)
	rebuild := "k3s2"
	if dist == bootstrapv1.DistributionK0s {
		rebuild = "k0s.1"
	}
	fixed := kairosImage(dist, correctedVersion+"+"+rebuild)
	c.h.Registry.BreakImage(broken)

	w := c.watchMachineCount()
	available := c.watchAvailable()
	start := time.Now()
	c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Version = correctedVersion
		s.KairosConfigSpec.Image = broken
	})

	// Cluster API's Machine controller reports the hook's failure in the Machine's Updating
	// condition with a fixed message ("UpdateMachine hook failed: please check controller logs
	// for errors"; core/reconcilers/machine/machine_controller_inplace_update.go in v1.14.2): the
	// extension's message, which says what the Node shows, reaches only its log. The control plane
	// reads the NodeOpUpgrade and the Node and writes the reason into the Machine's UpToDate
	// condition (which it owns) and its own RollingOut condition: that is where it is asserted.
	var failed *clusterv1.Machine
	framework.Eventually(t, 2*waitScale, func() error {
		failed = c.machineByName(before.Name)
		if failed == nil {
			return fmt.Errorf("Machine %s is gone", before.Name)
		}
		up, upd := conditions.Get(failed, clusterv1.MachineUpToDateCondition), conditions.Get(failed, clusterv1.MachineUpdatingCondition)
		if upd == nil || upd.Reason != clusterv1.MachineInPlaceUpdateFailedReason {
			return fmt.Errorf("Updating = %+v, want reason %s", upd, clusterv1.MachineInPlaceUpdateFailedReason)
		}
		if up == nil || !strings.Contains(up.Message, "came back from its reboot on its previous image") || !strings.Contains(up.Message, "kairos.io/boot-state=passive") ||
			!strings.Contains(up.Message, broken) {
			return fmt.Errorf("UpToDate = %+v, want the fallback the Node shows (%s)", up, broken)
		}
		return nil
	})
	t.Logf("the update to the broken image failed after %s: %s", time.Since(start).Round(time.Second), conditions.Get(failed, clusterv1.MachineUpToDateCondition).Message)
	c.waitCondition(controlplanev1.RollingOutCondition, metav1.ConditionTrue, "previous image", waitScale)
	var bf *simnode.BootFailure
	if err := c.nodeOf(*failed).LastUpgrade(); !errors.As(err, &bf) || bf.Reason != simnode.ReasonImageBroken {
		t.Errorf("the node's upgrade ended with %v, want a fallback for %s", err, simnode.ReasonImageBroken)
	}

	// Boot assessment brought the node back to the previous image and version.
	node := c.nodeOf(*failed)
	if running := node.RunningImage(); running != kairosImage(dist, inPlaceVersion) {
		t.Errorf("after the failed update the node runs %s, want the fallback %s", running, kairosImage(dist, inPlaceVersion))
	}
	framework.Eventually(t, waitScale, func() error {
		n := &corev1.Node{}
		if err := wl.Get(c.ctx, client.ObjectKey{Name: before.Status.NodeRef.Name}, n); err != nil {
			return err
		}
		if !strings.HasPrefix(n.Status.NodeInfo.KubeletVersion, inPlaceVersion+"+") {
			return fmt.Errorf("kubelet reports %s, want %s", n.Status.NodeInfo.KubeletVersion, inPlaceVersion)
		}
		return nil
	})
	// The cluster is served by the previous image.
	c.waitCondition(controlplanev1.AvailableCondition, metav1.ConditionTrue, "", waitScale)

	// Booting the fallback entry left GRUB's boot assessment variables set (Kairos clears them
	// only on a good boot of the active image). Nothing on the node is cleared by hand: the
	// document's after-upgrade step clears boot_assessment_tentative when the corrected image
	// is written, so GRUB tries it (without that step it would boot the fallback again and the
	// update fail with PreviousBootFailed; simnode TestBootAssessmentWithoutDocumentSteps).
	if ba := node.BootAssessment(); !ba.Enable || !ba.Tentative || !ba.UpgradeFailure {
		t.Errorf("boot assessment after the fallback: %+v, want both variables set and upgrade_failure", ba)
	}

	// Correcting the spec resumes the update.
	corrected := time.Now()
	c.update(func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Image = fixed })
	after := c.waitSettled(1, correctedVersion, 2*waitScale)[0]
	most, fewest := w.result()
	notAvailable := available.result()
	t.Logf("the corrected update completed %s after the correction (%s for (d) in all)",
		time.Since(corrected).Round(time.Second), time.Since(start).Round(time.Second))

	if after.UID != before.UID || most != 1 || fewest != 1 {
		t.Errorf("Machines were replaced: %s (uid %s) before, %s (uid %s) after, up to %d and down to %d active",
			before.Name, before.UID, after.Name, after.UID, most, fewest)
	}
	if running := c.nodeOf(after).RunningImage(); running != fixed {
		t.Errorf("the node runs image %s, want the corrected %s", running, fixed)
	}
	nodeAfter := &corev1.Node{}
	if err := wl.Get(c.ctx, client.ObjectKey{Name: before.Status.NodeRef.Name}, nodeAfter); err != nil {
		t.Fatal(err)
	}
	if nodeAfter.UID != nodeBefore.UID || !strings.HasPrefix(nodeAfter.Status.NodeInfo.KubeletVersion, correctedVersion+"+") {
		t.Errorf("Node after the corrected update: uid %s (was %s), kubelet %s", nodeAfter.UID, nodeBefore.UID, nodeAfter.Status.NodeInfo.KubeletVersion)
	}
	if m := c.simCluster().EtcdMembers(); len(m) != 1 || m[0].MemberID != members[0].MemberID {
		t.Errorf("etcd members after the corrected update %+v, before %+v", m, members)
	}
	for _, a := range []string{clusterv1.UpdateInProgressAnnotation, "runtime.cluster.x-k8s.io/pending-hooks"} {
		if _, ok := after.Annotations[a]; ok {
			t.Errorf("Machine %s still has annotation %s", after.Name, a)
		}
	}
	// A single node's control plane is down while its node reboots (etcd has one member), in
	// each attempt: Available is False then, and that is logged, not refused. What (d) asks is
	// that a failed update leaves the cluster served: Available is True again on the fallback
	// image (asserted above, before the correction) and after the corrected update.
	c.waitCondition(controlplanev1.AvailableCondition, metav1.ConditionTrue, "", waitScale)
	t.Logf("Available was not True %d times during (d), while the node rebooted: %v", len(notAvailable), notAvailable)
}
