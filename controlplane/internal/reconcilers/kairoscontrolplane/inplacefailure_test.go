package kairoscontrolplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/extension"
)

// correctedImage ships newVersion too: a rebuilt image, what a user sets after newImage failed.
const correctedImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.32.0-k0s.1"

// nodeSaid is what the node reported when its upgrade to newImage failed.
const nodeSaid = "ImageBroken: the image does not boot (the node runs the previous image again)"

// reconcileReplicasOnce builds the fixture with its writes recorded and reconciles its replicas
// once.
func (f *fixture) reconcileReplicasOnce(ctx context.Context, t *testing.T) (*env, *scope, *[]string) {
	t.Helper()
	writes := f.recordWrites()
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	return e, s, writes
}

// failedUpdateFixture is a single-replica control plane (maxSurge 0) whose Machine m1 was handed
// to Cluster API for an in-place update to newImage that failed: the Machine controller set
// Updating to InPlaceUpdateFailed, and the NodeOpUpgrade in the workload cluster says why.
func failedUpdateFixture(t *testing.T) *fixture {
	t.Helper()
	f := inPlaceFixture(t).replicas(1).maxSurge(0).upgrade()
	m := f.machine("m1", time.Hour)
	updatingAnnotations(m)
	withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdateFailedReason)(m)
	m.Status.Conditions[len(m.Status.Conditions)-1].Message = "UpdateMachine hook failed: please check controller logs for errors"
	f.configs["m1"].Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
	f.infras["m1"].SetAnnotations(mergeMaps(f.infras["m1"].GetAnnotations(), map[string]string{clusterv1.UpdateInProgressAnnotation: ""}))
	nou := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"image": newImage},
		"status": map[string]any{"phase": "Failed", "message": "Upgrade operation failed",
			"nodeStatuses": map[string]any{"m1": map[string]any{"phase": "Failed", "message": nodeSaid}}},
	}}
	nou.SetGroupVersionKind(extension.NodeOpUpgradeGVK)
	nou.SetNamespace(extension.NodeOpUpgradeNamespace)
	nou.SetName(extension.NodeOpUpgradeName(m, newImage))
	f.workloadObjs = append(f.workloadObjs, nou)
	return f
}

// TestInPlaceFailureShowsTheNodesReason: Cluster API's Machine controller says only "check
// controller logs"; the Machine's UpToDate condition, the RollingOut condition and one Warning
// event say what the node reported, and how to go on.
func TestInPlaceFailureShowsTheNodesReason(t *testing.T) {
	ctx := testContext(t)
	e := failedUpdateFixture(t).build()
	recorder := record.NewFakeRecorder(10)
	e.r.Recorder = recorder
	s := e.scope(ctx)
	if _, err := e.r.syncMachines(ctx, s); err != nil {
		t.Fatal(err)
	}
	c := conditions.Get(e.getMachine("m1"), clusterv1.MachineUpToDateCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != clusterv1.MachineUpToDateUpdatingReason {
		t.Fatalf("UpToDate of m1 = %+v, want False, %s", c, clusterv1.MachineUpToDateUpdatingReason)
	}
	containsAll(t, "UpToDate of m1", c.Message, "In-place update failed", nodeSaid, newImage, "spec.kairosConfigSpec.image")
	updateStatus(ctx, s)
	rolling := conditions.Get(e.kcp, controlplanev1.RollingOutCondition)
	containsAll(t, "RollingOut", rolling.Message, "Machine m1: in-place update failed", nodeSaid)

	// One event per reason, however often the control plane looks.
	e.scope(ctx)
	if n := len(recorder.Events); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	containsAll(t, "event", <-recorder.Events, "Warning InPlaceUpdateFailed", nodeSaid)
}

// TestInPlaceFailureFallbackReportedCompleted: the Kairos operator reports the NodeOpUpgrade
// Completed although boot assessment brought the node back on its previous image; the control
// plane reads the Node and says so where users look.
func TestInPlaceFailureFallbackReportedCompleted(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	for _, o := range f.workloadObjs {
		if nou, ok := o.(*unstructured.Unstructured); ok {
			nou.Object["status"] = map[string]any{"phase": "Completed", "message": "Upgrade operation completed successfully",
				"nodeStatuses": map[string]any{"m1": map[string]any{"phase": "Completed", "message": "Job and reboot completed successfully"}}}
			nou.SetAnnotations(map[string]string{extension.BootIDAnnotation: "boot-1"})
		}
	}
	e := f.build()
	// m1's Node rebooted (another boot ID) and runs the previous version; the node labeler says
	// it booted the passive (fallback) entry.
	node := &corev1.Node{}
	if err := e.wc.Get(ctx, client.ObjectKey{Name: "m1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Labels = map[string]string{"kairos.io/boot-state": "passive", "kairos.io/software-version": "v1.31.0-k0s.0"}
	node.Annotations = mergeMaps(node.Annotations, map[string]string{"kairos.io/version": "v3.5.0"})
	node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.BootID = "v1.31.0+k0s", "boot-2"
	if err := e.wc.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	s := e.scope(ctx)
	updateStatus(ctx, s)
	containsAll(t, "RollingOut", conditions.Get(e.kcp, controlplanev1.RollingOutCondition).Message,
		"Machine m1: in-place update failed", "node m1 came back from its reboot on its previous image", "kairos.io/boot-state=passive", newImage)
}

// TestInPlaceFailureWithoutNodeOpUpgrade: when the extension failed before creating a
// NodeOpUpgrade, the status says where the reason is.
func TestInPlaceFailureWithoutNodeOpUpgrade(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	f.workloadObjs = nil
	e := f.build()
	s := e.scope(ctx)
	updateStatus(ctx, s)
	containsAll(t, "RollingOut", conditions.Get(e.kcp, controlplanev1.RollingOutCondition).Message,
		"UpdateMachine hook failed before NodeOpUpgrade", "logs of Cluster API's Machine controller")
}

// TestInPlaceFailureCorrectedResumes: after the failure the spec asks for another image; the
// control plane asks the extension again and writes the corrected KairosConfig, keeping the
// update pending, so that the next UpdateMachine call targets it. No Machine is created or
// deleted.
func TestInPlaceFailureCorrectedResumes(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	f.kcp.Spec.KairosConfigSpec.Image = correctedImage
	e, s, writes := f.reconcileReplicasOnce(ctx, t)
	if len(f.runtime.calls) != 1 {
		t.Fatalf("CanUpdateMachine called %d times, want 1", len(f.runtime.calls))
	}
	// The KairosConfig gets the image; the version is the same (the fixture's Machine lacks some
	// metadata the control plane applies, hence a Machine apply too).
	if !slices.Contains(*writes, "patch KairosConfig/m1") || slices.Contains(*writes, "patch "+infraKind+"/m1") {
		t.Errorf("writes = %q, want the KairosConfig patched and the infrastructure machine not", *writes)
	}
	if config := e.getConfig("m1"); config.Spec.Image != correctedImage {
		t.Errorf("KairosConfig image = %s, want %s", config.Spec.Image, correctedImage)
	}
	if !e.inPlaceStarted("m1") {
		t.Fatal("m1 is no longer handed to Cluster API")
	}
	containsAll(t, "decision", s.inPlaceMessage, "correcting the failed in-place update of Machine m1")
	if len(e.deletedMachines()) > 0 || len(e.newMachines()) > 0 {
		t.Errorf("deleted %v, created %d", e.deletedMachines(), len(e.newMachines()))
	}

	// Done once: until the Machine controller calls the hook again the condition still says
	// failed, but the Machine is what the spec asks.
	*writes = nil
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if len(*writes) != 0 || len(f.runtime.calls) != 1 {
		t.Errorf("second reconciliation: writes %q, %d calls", *writes, len(f.runtime.calls))
	}
}

// TestInPlaceFailureWithoutSpecChangeWaits: a failed update the spec still asks for is left as
// it is (Cluster API retries the hook); the user decides.
func TestInPlaceFailureWithoutSpecChangeWaits(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	_, s, writes := f.reconcileReplicasOnce(ctx, t)
	if len(*writes) != 0 || len(f.runtime.calls) != 0 {
		t.Errorf("writes %q, %d calls", *writes, len(f.runtime.calls))
	}
	containsAll(t, "wait", s.waitMessage, "waiting for the in-place update of Machine(s) m1 to complete")
}

// TestInPlaceRunningUpdateIsNotRetargeted: a spec change while the update runs (not failed)
// waits for it, as Cluster API promises extensions; the Machine is updated again after.
func TestInPlaceRunningUpdateIsNotRetargeted(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason)(f.machines[0])
	f.kcp.Spec.KairosConfigSpec.Image = correctedImage
	_, s, writes := f.reconcileReplicasOnce(ctx, t)
	if len(*writes) != 0 || len(f.runtime.calls) != 0 {
		t.Errorf("writes %q, %d calls", *writes, len(f.runtime.calls))
	}
	containsAll(t, "wait", s.waitMessage, "waiting for the in-place update of Machine(s) m1 to complete")
}

// TestInPlaceFailureCorrectionTheExtensionCannotDo: a correction the extension cannot do in
// place is not written, and the Machine is not deleted (it is the only one): the status says so
// and how to replace it.
func TestInPlaceFailureCorrectionTheExtensionCannotDo(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t)
	f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo changed"}
	e, s, writes := f.reconcileReplicasOnce(ctx, t)
	if len(*writes) != 0 || len(f.runtime.calls) != 1 {
		t.Errorf("writes %q, %d calls", *writes, len(f.runtime.calls))
	}
	containsAll(t, "decision", s.inPlaceMessage, "cannot correct the failed in-place update of Machine m1", "spec.preCommands", "delete the Machine")
	updateStatus(ctx, s)
	containsAll(t, "RollingOut", conditions.Get(e.kcp, controlplanev1.RollingOutCondition).Message, "cannot correct the failed in-place update")
}

// TestInPlaceFailureCorrectionWaitsForPreflight: the corrected update takes the node down again,
// so the other Machines must pass the preflight checks first.
func TestInPlaceFailureCorrectionWaitsForPreflight(t *testing.T) {
	ctx := testContext(t)
	f := failedUpdateFixture(t).replicas(3)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", 2*time.Hour)
	notReady()(f.machines[2])
	f.kcp.Spec.KairosConfigSpec.Image = correctedImage
	_, s, writes := f.reconcileReplicasOnce(ctx, t)
	if len(*writes) != 0 || len(f.runtime.calls) != 0 {
		t.Errorf("writes %q, %d calls", *writes, len(f.runtime.calls))
	}
	containsAll(t, "preflight", strings.Join(s.preflightMessages, "\n"), "Machine m3 is not ready")
}
