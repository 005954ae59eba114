package kairoscontrolplane

// Failed in-place updates. Cluster API v1.14's Machine controller, when the UpdateMachine hook
// answers Failure, sets the Machine's Updating condition to reason InPlaceUpdateFailed with a fixed
// message ("UpdateMachine hook failed: please check controller logs for errors"), returns an
// error (the hook's message is only in its log) and calls the hook again with backoff, for ever:
// the update-in-progress annotation stays, and KubeadmControlPlane waits for it (only a
// remediation, which deletes the Machine, ends the wait). Two things are added here:
//
//   - the node's reason is shown where users look: the control plane reads the NodeOpUpgrade the
//     Kairos extension created (its name is a function of Machine and image) and, once the
//     operator reports it done, the Node (extension.CompletedOutcome) through the ClusterCache,
//     and writes what the node reported into the Machine's UpToDate condition, the
//     KairosControlPlane's RollingOut condition and a Warning event on the Machine;
//   - correcting the spec resumes the update: once the hook failed for what the Machine was
//     asked to become, and the KairosControlPlane now asks for something else, the control plane
//     asks CanUpdateMachine again for the new state and rewrites the desired Machine,
//     KairosConfig and infrastructure machine (the annotations stay). Cluster API's guarantee to
//     extensions (docs/proposals/20240807-in-place-updates.md: the Machine spec does not change
//     "until the update either completes or fails") holds: the spec changes only after a failure.
//     The Machine controller's next UpdateMachine call then targets the corrected image, and the
//     extension creates a new NodeOpUpgrade for it (it never runs two for one node at once).
//     While an update runs and has not failed, a changed spec waits for it, as in
//     KubeadmControlPlane: the Machine is then outdated and updated again.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/controlplane/internal/extension"
)

// inPlaceFailedFix tells users what to do about a failed in-place update.
const inPlaceFailedFix = "the Machine keeps its update pending until the KairosControlPlane's spec changes " +
	"(e.g. spec.kairosConfigSpec.image to an image that starts; the update resumes with it) or the Machine is deleted (it is replaced)"

// inPlaceUpdateFailed tells whether Cluster API's Machine controller reported that the
// UpdateMachine hook failed for the Machine as it is now.
func inPlaceUpdateFailed(m *clusterv1.Machine) bool {
	if !updatingInPlace(m) {
		return false
	}
	c := conditions.Get(m, clusterv1.MachineUpdatingCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == clusterv1.MachineInPlaceUpdateFailedReason
}

// observeInPlaceFailures reads, for each Machine whose in-place update failed, why: what the node
// reported in the NodeOpUpgrade of the image its KairosConfig asks for. The reads are uncached,
// and only made while an update has failed: the NodeOpUpgrade kind may not be served at all, and
// no informer is worth keeping for it.
func (r *Reconciler) observeInPlaceFailures(ctx context.Context, s *scope) {
	for _, m := range s.machines.Filter(inPlaceUpdateFailed).SortedByCreationTimestamp() {
		if s.inPlaceFailures == nil {
			s.inPlaceFailures = map[string]string{}
		}
		s.inPlaceFailures[m.Name] = r.inPlaceFailureReason(ctx, s, m)
		r.recordInPlaceFailure(m, s.inPlaceFailures[m.Name])
	}
}

func (r *Reconciler) inPlaceFailureReason(ctx context.Context, s *scope, m *clusterv1.Machine) string {
	const hookFailed = "Cluster API's UpdateMachine hook failed"
	config, ok := s.configs[m.Name]
	if !ok || config.Spec.Image == "" || !m.Status.NodeRef.IsDefined() {
		return hookFailed + " (the Machine's Node or image is not known, so no NodeOpUpgrade to read)"
	}
	name := extension.NodeOpUpgradeName(m, config.Spec.Image)
	remote, err := r.ClusterCache.GetUncachedClient(ctx, s.clusterKey())
	if err != nil {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			ctrl.LoggerFrom(ctx).Error(err, "Reaching the workload cluster to read why an in-place update failed", "Machine", klog.KObj(m))
		}
		return fmt.Sprintf("%s; NodeOpUpgrade %s/%s cannot be read: the workload cluster's API server does not answer", hookFailed, extension.NodeOpUpgradeNamespace, name)
	}
	nou := &unstructured.Unstructured{}
	nou.SetGroupVersionKind(extension.NodeOpUpgradeGVK)
	err = remote.Get(ctx, client.ObjectKey{Namespace: extension.NodeOpUpgradeNamespace, Name: name}, nou)
	switch {
	case meta.IsNoMatchError(err):
		// The extension waits for a missing operator instead of failing (extension.UpdateMachine),
		// but a hook that failed for another reason (a lost reply) still needs it.
		return hookFailed + ": " + extension.OperatorMissingMessage
	case apierrors.IsNotFound(err):
		// The extension refused before creating it (no image, ...): its message is in the
		// Machine controller's log only.
		return fmt.Sprintf("%s before NodeOpUpgrade %s/%s for %s was created: see the logs of Cluster API's Machine controller", hookFailed, extension.NodeOpUpgradeNamespace, name, config.Spec.Image)
	case err != nil:
		ctrl.LoggerFrom(ctx).Error(err, "Reading the NodeOpUpgrade of a failed in-place update", "Machine", klog.KObj(m), "NodeOpUpgrade", name)
		return fmt.Sprintf("%s; NodeOpUpgrade %s/%s cannot be read: %v", hookFailed, extension.NodeOpUpgradeNamespace, name, err)
	}
	if msg, failed := extension.UpgradeFailure(nou, m.Status.NodeRef.Name); failed {
		return msg
	}
	phase, _, _ := unstructured.NestedString(nou.Object, "status", "phase")
	if phase == extension.PhaseCompleted {
		// The operator reports a node done whichever image it came back on: the Node tells.
		node := &corev1.Node{}
		if err := remote.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node); err == nil {
			if o := extension.CompletedOutcome(nou, node, m.Spec.Version, config.Spec.Image, time.Now()); o.Failure != "" {
				return o.Failure
			}
		}
	}
	// The NodeOpUpgrade did not fail: the hook failed for another reason (a lost reply, the
	// Machine's objects), which the Machine controller's log holds.
	return fmt.Sprintf("%s while NodeOpUpgrade %s/%s is %q: see the logs of Cluster API's Machine controller", hookFailed, extension.NodeOpUpgradeNamespace, name, phase)
}

// recordInPlaceFailure records a Warning event on the Machine when its failure reason is new (the
// Machine controller retries the hook with backoff; one event per reason is enough).
func (r *Reconciler) recordInPlaceFailure(m *clusterv1.Machine, reason string) {
	if r.Recorder == nil {
		return
	}
	if last, ok := r.failureEvents.Load(m.UID); ok && last == reason {
		return
	}
	r.failureEvents.Store(m.UID, reason)
	r.Recorder.Event(m, corev1.EventTypeWarning, clusterv1.MachineInPlaceUpdateFailedReason, "In-place update failed: "+reason+"; "+inPlaceFailedFix)
}

// inPlaceFailureMessage is what the status says about a Machine whose in-place update failed.
func (s *scope) inPlaceFailureMessage(m *clusterv1.Machine) string {
	return "in-place update failed: " + s.inPlaceFailures[m.Name] + "; " + inPlaceFailedFix
}

// correctFailedInPlaceUpdates re-targets the failed in-place updates whose Machine the spec no
// longer describes (see the top of this file). It reports whether it handled the Machines being
// updated: corrected one, or waits for one it cannot correct yet; otherwise the caller waits for
// the updates as usual.
func (r *Reconciler) correctFailedInPlaceUpdates(ctx context.Context, s *scope) (handled bool, _ ctrl.Result, _ error) {
	if !r.inPlaceEnabled() {
		return false, ctrl.Result{}, nil
	}
	for _, m := range s.updatingMachines().SortedByCreationTimestamp() {
		if inPlaceTriggerIncomplete(m) || !inPlaceUpdateFailed(m) {
			continue
		}
		if ok, _ := s.upToDate(m); ok {
			// Failed for what the spec still asks: nothing to correct, the user decides.
			continue
		}
		// A Machine marked for deletion or remediation is going: the remediation phase acts.
		if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			continue
		}
		if _, ok := m.Annotations[clusterv1.RemediateMachineAnnotation]; ok {
			continue
		}
		log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))
		handlers, err := r.RuntimeClient.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, m)
		if err != nil {
			return false, ctrl.Result{}, fmt.Errorf("listing the CanUpdateMachine extensions for Machine %s: %w", m.Name, err)
		}
		if len(handlers) != 1 {
			s.inPlaceDecision("cannot correct the failed in-place update of Machine %s: %d CanUpdateMachine extensions are registered (%s), one is needed; "+
				"delete the Machine to replace it", m.Name, len(handlers), strings.Join(handlers, ", "))
			continue
		}
		// The update takes the node down again: the other Machines must be fine, and etcd keep
		// quorum without this member. The Machine itself is not checked: its failed update is
		// what is being repaired.
		if problems := s.withRebootProblems(m, s.problemsExcept(m)); len(problems) > 0 {
			r.preflightFailed(ctx, s, problems)
			return true, ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		objs, why, err := r.inPlaceObjectsFor(ctx, s, m)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		if why == "" {
			// The current objects are what the failed update was asked to reach: the extension
			// answers for the change from there to the corrected spec.
			if why, err = r.canUpdateMachine(ctx, s, objs, handlers[0]); err != nil {
				return false, ctrl.Result{}, err
			}
		}
		if why != "" {
			s.inPlaceDecision("cannot correct the failed in-place update of Machine %s in place: %s; delete the Machine to replace it", m.Name, why)
			log.Info("The failed in-place update cannot be corrected in place", "reason", why)
			continue
		}
		log.Info("Correcting a failed in-place update with the changed spec", "version", objs.desiredMachine.Spec.Version, "image", objs.desiredConfigSpec.Image)
		if err := r.triggerInPlaceUpdate(ctx, s, objs); err != nil {
			return false, ctrl.Result{}, fmt.Errorf("correcting the failed in-place update of Machine %s: %w", m.Name, err)
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(m, corev1.EventTypeNormal, "InPlaceUpdateCorrected", "Failed in-place update resumes with the changed spec: version %s, image %s",
				objs.desiredMachine.Spec.Version, objs.desiredConfigSpec.Image)
		}
		s.inPlaceDecision("correcting the failed in-place update of Machine %s: it resumes with the changed spec", m.Name)
		s.wait("updating Machine %s in place with the corrected spec", m.Name)
		return true, ctrl.Result{}, nil
	}
	return false, ctrl.Result{}, nil
}

// capitalize upper-cases the first letter of a message that starts a condition's bullet.
func capitalize(msg string) string {
	if msg == "" {
		return msg
	}
	return strings.ToUpper(msg[:1]) + msg[1:]
}
