package kairoscontrolplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util/cache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/contract"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/patch"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
)

// machineLabels are the labels of every object of a control-plane Machine.
func machineLabels(s *scope) map[string]string {
	return mergeMaps(s.kcp.Spec.MachineTemplate.ObjectMeta.Labels, map[string]string{
		clusterv1.ClusterNameLabel:           s.cluster.Name,
		clusterv1.MachineControlPlaneLabel:   "",
		controlplanev1.ControlPlaneNameLabel: controlPlaneNameLabelValue(s.kcp),
	})
}

// controlPlaneNameLabelValue is the control-plane-name label's value: the name, or a hash of
// it when it is longer than a label value may be (63 characters), as Cluster API's kubeadm
// control plane writes it (util/labels/format).
func controlPlaneNameLabelValue(kcp *controlplanev1.KairosControlPlane) string {
	return format.MustFormatValue(kcp.Name)
}

// createMachine creates a control-plane Machine with its KairosConfig and its infrastructure
// machine (cloned from the template, whatever its kind). The etcd-member pre-terminate hook is
// set from the start, so no Machine can go away without leaving etcd first.
func (r *Reconciler) createMachine(ctx context.Context, s *scope, failureDomain string, extraAnnotations map[string]string) error {
	name, err := desiredstate.MachineName(s.kcp.Spec.MachineNaming.Template, s.cluster.Name, s.kcp.Name, rand.String(5))
	if err != nil {
		return fmt.Errorf("spec.machineNaming.template %s", err)
	}
	labels := machineLabels(s)
	annotations := s.kcp.Spec.MachineTemplate.ObjectMeta.Annotations
	// Infrastructure machines and KairosConfigs are owned, not controlled: the Machine
	// controller takes control once the Machine exists.
	owner := metav1.OwnerReference{
		APIVersion: controlplanev1.GroupVersion.String(), Kind: "KairosControlPlane", Name: s.kcp.Name, UID: s.kcp.UID,
	}

	// The KairosConfig goes first: it is what a bootstrap provider outside the version-skew
	// policy refuses, and then nothing else is created and cleaned up again on every retry.
	config, err := s.newKairosConfig(name, labels, annotations, owner)
	if err != nil {
		return err
	}
	if err := r.createKairosConfig(ctx, s, config, false); err != nil {
		return err
	}

	templateRef := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	apiVersion, err := apiVersionFor(ctx, r.Client, templateRef.GroupKind())
	if err != nil {
		s.infraTemplateErr = err.Error()
		return kerrors.NewAggregate([]error{err, r.cleanup(ctx, config)})
	}
	infra, infraRef, err := external.CreateFromTemplate(ctx, &external.CreateFromTemplateInput{
		Client: r.Client,
		TemplateRef: &corev1.ObjectReference{
			APIVersion: apiVersion, Kind: templateRef.Kind, Namespace: s.kcp.Namespace, Name: templateRef.Name,
		},
		Namespace:   s.kcp.Namespace,
		Name:        name,
		ClusterName: s.cluster.Name,
		OwnerRef:    &owner,
		Labels:      labels,
		Annotations: annotations,
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			s.infraTemplateErr = fmt.Sprintf("%s %s does not exist", templateRef.Kind, templateRef.Name)
		}
		return kerrors.NewAggregate([]error{fmt.Errorf("cloning the infrastructure template %s %s: %w", templateRef.Kind, templateRef.Name, err), r.cleanup(ctx, config)})
	}

	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.kcp.Namespace, Labels: labels,
			Annotations:     mergeMaps(annotations, extraAnnotations, map[string]string{controlplanev1.EtcdMemberHookAnnotation: ""}),
			OwnerReferences: []metav1.OwnerReference{s.ownerRef()},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: s.cluster.Name,
			Version:     s.kcp.Spec.Version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
			}},
			InfrastructureRef: infraRef,
			FailureDomain:     failureDomain,
		},
	}
	setMutableMachineSpec(s, machine)
	if err := r.applyMachine(ctx, machine); err != nil {
		return kerrors.NewAggregate([]error{fmt.Errorf("creating Machine %s: %w", name, err), r.cleanup(ctx, infra, config)})
	}
	// The next reconciliation must see this Machine, or it would create another one.
	r.controller.DeferNextReconcileUntilCacheUpToDate(s.kcp, capicontrollerutil.StructuredObject(clusterv1.GroupVersion, "Machine"), machine.ResourceVersion)
	ctrl.LoggerFrom(ctx).Info("Created control-plane Machine", "Machine", klog.KObj(machine), "failureDomain", failureDomain)
	return nil
}

// newKairosConfig builds the KairosConfig of a new Machine, in the API version the installed
// bootstrap provider serves for the contract. Its spec is what the control plane asks for and no
// more: the bootstrap provider's own webhook defaults the rest, so a control plane newer than the
// bootstrap provider never sends a field only its own defaults would set.
func (s *scope) newKairosConfig(name string, labels, annotations map[string]string, owner metav1.OwnerReference) (*unstructured.Unstructured, error) {
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.kcp.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: *s.requestedConfig(),
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(config)
	if err != nil {
		return nil, fmt.Errorf("converting KairosConfig %s: %w", name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	u.SetAPIVersion(s.bootstrap.apiVersion)
	u.SetKind("KairosConfig")
	return u, nil
}

// createKairosConfig creates (or, with dryRun, only validates) a KairosConfig under the control
// plane's field manager with strict field validation: a field the installed CRD does not know
// is an error, never silently dropped (which would make the Machine look outdated forever). A
// refusal is recorded for the BootstrapProviderCompatible condition and returns
// errConfigRefused.
func (r *Reconciler) createKairosConfig(ctx context.Context, s *scope, config *unstructured.Unstructured, dryRun bool) error {
	opts := []client.CreateOption{client.FieldOwner(fieldManager), client.FieldValidation(metav1.FieldValidationStrict)}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	err := r.Client.Create(ctx, config, opts...)
	if err == nil {
		return nil
	}
	if msg, ok := configRefusal(err, s.bootstrap); ok {
		s.configRefused = msg
		ctrl.LoggerFrom(ctx).Info("The bootstrap provider refused a KairosConfig", "KairosConfig", config.GetName(), "reason", err.Error())
		return errConfigRefused
	}
	return fmt.Errorf("creating KairosConfig %s: %w", config.GetName(), err)
}

// setMutableMachineSpec sets what may change on an existing Machine without replacing it.
func setMutableMachineSpec(s *scope, m *clusterv1.Machine) {
	m.Spec.ReadinessGates = s.kcp.Spec.MachineTemplate.Spec.ReadinessGates
	m.Spec.Deletion = machineDeletion(s)
	// A control-plane Machine is available as soon as it is ready.
	m.Spec.MinReadySeconds = ptr.To[int32](0)
}

// deleteMachine deletes a control-plane Machine; the next reconciliation waits until the cache
// has seen the deletion, so that it never counts the Machine as active again.
func (r *Reconciler) deleteMachine(ctx context.Context, s *scope, m *clusterv1.Machine) error {
	deleted, err := r.machineDeleter.Delete(ctx, m)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deleting Machine %s: %w", m.Name, err)
	}
	if deleted != nil {
		r.controller.DeferNextReconcileUntilCacheUpToDate(s.kcp, capicontrollerutil.StructuredObject(clusterv1.GroupVersion, "Machine"), deleted.GetResourceVersion())
	}
	return nil
}

func machineDeletion(s *scope) clusterv1.MachineDeletionSpec {
	d := s.kcp.Spec.MachineTemplate.Spec.Deletion
	return clusterv1.MachineDeletionSpec{
		NodeDrainTimeoutSeconds:        d.NodeDrainTimeoutSeconds,
		NodeVolumeDetachTimeoutSeconds: d.NodeVolumeDetachTimeoutSeconds,
		NodeDeletionTimeoutSeconds:     d.NodeDeletionTimeoutSeconds,
	}
}

func (r *Reconciler) cleanup(ctx context.Context, objs ...client.Object) error {
	var errs []error
	for _, o := range objs {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("cleaning up %s: %w", o.GetName(), err))
		}
	}
	return kerrors.NewAggregate(errs)
}

// apiVersionFor resolves the API version of a kind the way Cluster API does: from the contract
// labels of its CRD, the last version listed for the v1beta2 contract, or, for providers that
// still implement only the v1beta1 contract (Cluster API v1.14 accepts them; CAPK v0.11 is one),
// the last version listed for v1beta1. Cluster API's own helper for this is internal; reading
// objects uses external.GetObjectFromContractVersionedRef, but cloning a template needs the
// version first.
func apiVersionFor(ctx context.Context, c client.Reader, gk schema.GroupKind) (string, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	if err := c.Get(ctx, client.ObjectKey{Name: contract.CalculateCRDName(gk.Group, gk.Kind)}, crd); err != nil {
		return "", fmt.Errorf("reading the CRD of %s: %w", gk, err)
	}
	for _, contractVersion := range []string{"v1beta2", "v1beta1"} {
		if versions := crd.Labels[clusterv1.GroupVersion.Group+"/"+contractVersion]; versions != "" {
			parts := strings.Split(versions, "_")
			return schema.GroupVersion{Group: gk.Group, Version: parts[len(parts)-1]}.String(), nil
		}
	}
	return "", fmt.Errorf("the CRD of %s has no %s/v1beta2 or /v1beta1 contract label: is its provider compatible with Cluster API v1.14?", gk, clusterv1.GroupVersion.Group)
}

// fieldManager owns, through server-side apply, everything the control plane sets on its
// Machines: labels and annotations removed from spec.machineTemplate.metadata then leave the
// Machines too, and nobody else's labels are touched. KairosConfigs are created under the same
// name, so that their managedFields say which fields the control plane set (see ownedFields).
const fieldManager = "kairos-controlplane"

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

// appliedStates remembers the Machine states known to be applied, by Machine uid,
// resourceVersion and desired state. It is only an optimization: after a restart, or once an
// entry expired, each Machine is read once. Entries expire like those of Cluster API's
// server-side-apply cache (util/cache, DefaultTTL), so the entries of deleted Machines, and of
// older resourceVersions, do not pile up.
type appliedStates struct {
	// ttl is how long an entry lives; default cache.DefaultTTL.
	ttl     time.Duration
	once    sync.Once
	entries cache.Cache[appliedState]
}

// appliedState is a cache key: uid, resourceVersion and desired state.
type appliedState string

func (a appliedState) Key() string { return string(a) }

func (a *appliedStates) store() cache.Cache[appliedState] {
	// One cache per reconciler, for the life of the process: its expiry sweep stops with it.
	a.once.Do(func() {
		if a.ttl <= 0 {
			a.ttl = cache.DefaultTTL
		}
		a.entries = cache.New[appliedState](context.Background(), a.ttl)
	})
	return a.entries
}

func (a *appliedStates) has(uid types.UID, rv, key string) bool {
	_, ok := a.store().Has(string(uid) + "/" + rv + "/" + key)
	return ok
}

func (a *appliedStates) set(uid types.UID, rv, key string) {
	a.store().Add(appliedState(string(uid) + "/" + rv + "/" + key))
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
		if !ok {
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

func mergeMaps(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
