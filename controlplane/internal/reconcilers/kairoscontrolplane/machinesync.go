package kairoscontrolplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// applyMachine creates or updates a Machine with server-side apply and reads back its
// resourceVersion.
func (r *Reconciler) applyMachine(ctx context.Context, m *clusterv1.Machine) error {
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	// Only what this controller means to own: no status, no server-set metadata. The uid of an
	// existing Machine stays: server-side apply then updates that very Machine or fails, and never
	// creates it again after a stale cache still listed it (Cluster API's ssa.Patch keeps it for
	// the same reason).
	unstructured.RemoveNestedField(u.Object, "status")
	for _, f := range []string{"creationTimestamp", "resourceVersion", "managedFields", "generation"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return err
	}
	m.ResourceVersion = u.GetResourceVersion()
	return nil
}

// desiredMachine is what the control plane applies to an existing Machine: its identity as
// created, the current metadata and mutable spec fields of the template, and the annotations
// the control plane itself put there and still needs.
func desiredMachine(s *scope, m *clusterv1.Machine) *clusterv1.Machine {
	annotations := mergeMaps(s.kcp.Spec.MachineTemplate.ObjectMeta.Annotations)
	for _, k := range []string{controlplanev1.EtcdMemberHookAnnotation, controlplanev1.RemediationForAnnotation} {
		if v, ok := m.Annotations[k]; ok {
			annotations = mergeMaps(annotations, map[string]string{k: v})
		}
	}
	d := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, Labels: machineLabels(s), Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{s.ownerRef()},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName:       m.Spec.ClusterName,
			Version:           m.Spec.Version,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: m.Spec.Bootstrap.ConfigRef},
			InfrastructureRef: m.Spec.InfrastructureRef,
			FailureDomain:     m.Spec.FailureDomain,
		},
	}
	setMutableMachineSpec(s, d)
	return d
}

// machineNeedsApply tells whether applying desired would change the Machine: a label or
// annotation is missing, differs, or was applied before and is no longer wanted, or a mutable
// spec field differs. Nothing is sent otherwise.
func machineNeedsApply(m, desired *clusterv1.Machine) bool {
	ownedLabels, ownedAnnotations := ownedMetadataKeys(m, fieldManager)
	if !containsAllOf(m.Labels, desired.Labels) || !containsAllOf(m.Annotations, desired.Annotations) ||
		!isSubset(ownedLabels, desired.Labels) || !isSubset(ownedAnnotations, desired.Annotations) {
		return true
	}
	if !metav1.IsControlledBy(m, &metav1.ObjectMeta{UID: desired.OwnerReferences[0].UID}) {
		return true
	}
	return !equality.Semantic.DeepEqual(m.Spec.ReadinessGates, desired.Spec.ReadinessGates) ||
		!equality.Semantic.DeepEqual(m.Spec.Deletion, desired.Spec.Deletion) ||
		ptr.Deref(m.Spec.MinReadySeconds, -1) != ptr.Deref(desired.Spec.MinReadySeconds, -1)
}

func containsAllOf(have, want map[string]string) bool {
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			return false
		}
	}
	return true
}

func isSubset(keys []string, of map[string]string) bool {
	for _, k := range keys {
		if _, ok := of[k]; !ok {
			return false
		}
	}
	return true
}

// ownedMetadataKeys lists the labels and annotations a field manager applied to an object, as
// its managedFields record them (f:metadata -> f:labels / f:annotations -> f:<key>).
func ownedMetadataKeys(obj metav1.Object, manager string) (labels, annotations []string) {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			continue
		}
		for k := range fields["f:metadata"]["f:labels"] {
			labels = append(labels, strings.TrimPrefix(k, "f:"))
		}
		for k := range fields["f:metadata"]["f:annotations"] {
			annotations = append(annotations, strings.TrimPrefix(k, "f:"))
		}
	}
	return labels, annotations
}

// syncMachines propagates what may change without a rollout (metadata, deletion timeouts,
// readiness gates) to existing Machines and their KairosConfigs and infrastructure machines,
// and sets each Machine's UpToDate and EtcdMemberHealthy conditions.
func (r *Reconciler) syncMachines(ctx context.Context, s *scope) (ctrl.Result, error) {
	labels := machineLabels(s)
	annotations := s.kcp.Spec.MachineTemplate.ObjectMeta.Annotations
	for _, m := range s.machines {
		if err := r.setMachineConditions(ctx, s, m); err != nil {
			return ctrl.Result{}, err
		}
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.syncMachine(ctx, s, m); err != nil {
			return ctrl.Result{}, err
		}
		if config, ok := s.configs[m.Name]; ok {
			if err := r.syncMetadata(ctx, config, labels, annotations); err != nil {
				return ctrl.Result{}, err
			}
		}
		infra, ok := s.infraMachines[m.Name]
		if !ok {
			continue
		}
		if err := r.syncMetadata(ctx, infra, labels, annotations); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// syncMachine applies the desired state to a Machine when it would change something. The
// manager's cache strips managedFields (as Cluster API's managers do, to save memory), so which
// labels this controller applied before is read from the API server, once per Machine
// resourceVersion and desired state: a steady control plane sends no write at all.
func (r *Reconciler) syncMachine(ctx context.Context, s *scope, m *clusterv1.Machine) error {
	desired := desiredMachine(s, m)
	key, err := applyKey(desired)
	if err != nil {
		return err
	}
	if r.applied.has(m.UID, m.ResourceVersion, key) {
		return nil
	}
	live := m
	if !machineNeedsApply(m, desired) {
		// Everything is in place unless an old label or annotation has to go: ask the API server
		// which ones this controller owns.
		live = &clusterv1.Machine{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), live); err != nil {
			return fmt.Errorf("reading Machine %s: %w", m.Name, err)
		}
	}
	rv := live.ResourceVersion
	if machineNeedsApply(live, desired) {
		if err := r.applyMachine(ctx, desired); err != nil {
			if apierrors.IsConflict(err) {
				// The Machine with this uid is gone; the cache catches up and the next
				// reconciliation no longer lists it.
				ctrl.LoggerFrom(ctx).V(4).Info("Machine is gone, not updating it", "Machine", klog.KObj(m))
				return nil
			}
			return fmt.Errorf("updating Machine %s: %w", m.Name, err)
		}
		rv = desired.ResourceVersion
	}
	r.applied.set(m.UID, rv, key)
	return nil
}

// applyKey identifies a desired Machine state.
func applyKey(desired *clusterv1.Machine) (string, error) {
	raw, err := json.Marshal(struct {
		Meta metav1.ObjectMeta
		Spec clusterv1.MachineSpec
	}{desired.ObjectMeta, desired.Spec})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// setMachineConditions sets the conditions the control plane owns on a Machine; the patch is
// empty, and not sent, when they did not change.
func (r *Reconciler) setMachineConditions(ctx context.Context, s *scope, m *clusterv1.Machine) error {
	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return err
	}
	owned := []string{controlplanev1.MachineEtcdMemberHealthyCondition}
	conditions.Set(m, etcdMemberCondition(s, m))
	if m.DeletionTimestamp.IsZero() {
		ok, reasons := s.upToDate(m)
		cond := metav1.Condition{Type: clusterv1.MachineUpToDateCondition, Status: metav1.ConditionTrue, Reason: clusterv1.MachineUpToDateReason}
		switch {
		case updatingInPlace(m):
			// As KubeadmControlPlane: not up to date until the node runs what the spec says.
			msg := "* In-place update in progress"
			if c := conditions.Get(m, clusterv1.MachineUpdatingCondition); c != nil && c.Status == metav1.ConditionTrue && c.Message != "" {
				msg = "* " + c.Message
			}
			if _, ok := s.inPlaceFailures[m.Name]; ok {
				// Cluster API's message says to read its logs: say what they would tell.
				msg = "* " + capitalize(s.inPlaceFailureMessage(m))
			}
			cond = metav1.Condition{Type: clusterv1.MachineUpToDateCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.MachineUpToDateUpdatingReason, Message: msg}
		case !ok:
			cond = metav1.Condition{Type: clusterv1.MachineUpToDateCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.MachineNotUpToDateReason, Message: "* " + strings.Join(reasons, "\n* ")}
		}
		conditions.Set(m, cond)
		owned = append(owned, clusterv1.MachineUpToDateCondition)
	}
	if err := helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: owned}); err != nil {
		return fmt.Errorf("updating the conditions of Machine %s: %w", m.Name, err)
	}
	return nil
}

// infraMachine reads a Machine's infrastructure machine, or nil when it does not exist (yet).
func (r *Reconciler) infraMachine(ctx context.Context, m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	infra, err := external.GetObjectFromContractVersionedRef(ctx, r.Client, m.Spec.InfrastructureRef, m.Namespace)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the infrastructure machine of %s: %w", m.Name, err)
	}
	return infra, nil
}

// syncMetadata adds the desired labels and annotations to an object, patching only if needed.
func (r *Reconciler) syncMetadata(ctx context.Context, obj client.Object, labels, annotations map[string]string) error {
	changed := false
	for k, v := range labels {
		if cur, ok := obj.GetLabels()[k]; !ok || cur != v {
			changed = true
		}
	}
	for k, v := range annotations {
		if cur, ok := obj.GetAnnotations()[k]; !ok || cur != v {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	var before client.Object
	if u, ok := obj.(*unstructured.Unstructured); ok {
		before = u.DeepCopy()
	} else {
		before = obj.DeepCopyObject().(client.Object)
	}
	obj.SetLabels(mergeMaps(obj.GetLabels(), labels))
	obj.SetAnnotations(mergeMaps(obj.GetAnnotations(), annotations))
	if err := r.Client.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("updating metadata of %s: %w", obj.GetName(), err)
	}
	return nil
}
