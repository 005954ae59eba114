package kairoscontrolplane

// In-place updates (Cluster API's InPlaceUpdates feature gate), the control plane's side of the
// contract (cluster-api v1.14 docs/book/src/developer/providers/contracts/control-plane.md, "in-place
// updates", and docs/proposals/20240807-in-place-updates-implementation-notes.md), modelled on
// KubeadmControlPlane (controlplane/kubeadm/reconcilers/kubeadmcontrolplane: update.go,
// inplace*.go):
//
//   - the decision is taken only where the rollout would otherwise delete an outdated Machine
//     (scaleDown), so that a failed update costs no more than the deletion would have;
//   - CanUpdateMachine is asked once; a "yes" is recorded at once on the Machine with the
//     update-in-progress annotation, and from then on the update is completed whatever happens
//     (the desired Machine, infrastructure machine and KairosConfig are written, each with the
//     annotation, then the UpdateMachine hook is marked pending), also by a later reconciliation
//     when this one is interrupted (completeInPlaceUpdateTriggers);
//   - Cluster API's Machine controller then calls UpdateMachine and removes both annotations when
//     done; until then the control plane creates and deletes nothing (one operation at a time).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/collections"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// updateMachineHook is the UpdateMachine hook's name in the pending-hooks annotation.
var updateMachineHook = runtimecatalog.HookName(runtimehooksv1.UpdateMachine)

// hookPending tells whether hook is in obj's pending-hooks annotation (a comma-separated set,
// as Cluster API's internal hooks package writes it).
func hookPending(obj metav1.Object, hook string) bool {
	return slices.Contains(strings.Split(obj.GetAnnotations()[runtimev1.PendingHooksAnnotation], ","), hook)
}

// markHookPending adds hook to obj's pending-hooks annotation, keeping the value a sorted set
// without empty items as Cluster API's hooks.MarkObjectAsPending does (Cluster API's Machine
// controller parses it back); it reports whether the annotation changed.
func markHookPending(obj metav1.Object, hook string) bool {
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	set := sets.New(strings.Split(annotations[runtimev1.PendingHooksAnnotation], ",")...)
	set.Delete("")
	set.Insert(hook)
	value := strings.Join(sets.List(set), ",")
	if cur, ok := annotations[runtimev1.PendingHooksAnnotation]; ok && cur == value {
		return false
	}
	annotations[runtimev1.PendingHooksAnnotation] = value
	obj.SetAnnotations(annotations)
	return true
}

// updatingInPlace tells whether a Machine is being updated in place: the control plane started
// it (update-in-progress annotation) or Cluster API's Machine controller has not finished it
// (UpdateMachine pending). Cluster API's inplace.IsUpdateInProgress, which is internal.
func updatingInPlace(m *clusterv1.Machine) bool {
	_, started := m.Annotations[clusterv1.UpdateInProgressAnnotation]
	return started || hookPending(m, updateMachineHook)
}

// inPlaceTriggerIncomplete tells whether the control plane decided to update a Machine in place
// but was interrupted before it marked the UpdateMachine hook pending.
func inPlaceTriggerIncomplete(m *clusterv1.Machine) bool {
	_, started := m.Annotations[clusterv1.UpdateInProgressAnnotation]
	return started && !hookPending(m, updateMachineHook)
}

// updatingMachines are the Machines being updated in place. Deleting ones are left out: they
// are going (a remediation can delete a Machine whose update failed), and the preflight checks
// wait for them anyway.
func (s *scope) updatingMachines() collections.Machines {
	return s.machines.Filter(collections.Not(collections.HasDeletionTimestamp), updatingInPlace)
}

// inPlaceEnabled tells whether the control plane may update Machines in place at all.
func (r *Reconciler) inPlaceEnabled() bool {
	return feature.Gates.Enabled(feature.InPlaceUpdates) && r.RuntimeClient != nil
}

// inPlaceObjects are the current and desired objects of a Machine updated in place.
type inPlaceObjects struct {
	machine, desiredMachine *clusterv1.Machine
	infra, desiredInfra     *unstructured.Unstructured
	config                  *bootstrapv1.KairosConfig
	// configSpec and desiredConfigSpec are the KairosConfig specs the decision compares, with
	// this release's defaults on both sides, as compareWithSpec compares them: what the control
	// plane set (not the bootstrap provider's defaults) against what it asks for now.
	configSpec, desiredConfigSpec *bootstrapv1.KairosConfigSpec
	// configOwned tells whether the KairosConfig's managedFields say which fields the control
	// plane set (see ownedConfigSpec).
	configOwned bool
}

// inPlaceObjectsFor computes the objects of an in-place update of m, or says why they cannot be
// computed (a missing object).
func (r *Reconciler) inPlaceObjectsFor(ctx context.Context, s *scope, m *clusterv1.Machine) (*inPlaceObjects, string, error) {
	o := &inPlaceObjects{machine: m}
	var ok bool
	if o.config, ok = s.configs[m.Name]; !ok {
		return nil, fmt.Sprintf("its KairosConfig %s does not exist", m.Spec.Bootstrap.ConfigRef.Name), nil
	}
	if o.infra, ok = s.infraMachines[m.Name]; !ok {
		return nil, fmt.Sprintf("its infrastructure machine %s %s does not exist", m.Spec.InfrastructureRef.Kind, m.Spec.InfrastructureRef.Name), nil
	}
	if s.baseConfig == nil {
		return nil, s.configTemplateErr, nil
	}

	// The Machine: the version is what changes; the fields syncMachines keeps in sync go along.
	o.desiredMachine = desiredMachine(s, m)
	o.desiredMachine.Spec.Version = s.kcp.Spec.Version

	// The KairosConfig. Single-node mode follows the replica count and is no reason to roll out
	// (compareWithSpec), so it stays as it is.
	have := o.config.Spec.DeepCopy()
	if owned, ok := s.ownedConfigs[m.Name]; ok {
		have, o.configOwned = owned.DeepCopy(), true
	}
	have.Default()
	want := s.desiredConfig()
	want.SingleNode = have.SingleNode
	o.configSpec, o.desiredConfigSpec = have, want

	// The infrastructure machine: what a clone of the current template would set, on top of
	// what the infrastructure provider set since (providerID and the like). A field the template
	// no longer sets is not removed: nothing tells it from a field the provider set, since
	// infrastructure machines are created from templates, not applied. The Kairos update
	// extension refuses every infrastructure change anyway.
	ref := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	tmpl, err := external.GetObjectFromContractVersionedRef(ctx, r.Client, ref, s.kcp.Namespace)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("spec.machineTemplate.spec.infrastructureRef: %s %s does not exist", ref.Kind, ref.Name), nil
		}
		return nil, "", fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	tmplSpec, _, err := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	if err != nil {
		return nil, "", fmt.Errorf("reading spec.template.spec of %s %s: %w", ref.Kind, ref.Name, err)
	}
	o.desiredInfra = o.infra.DeepCopy()
	curSpec, _, err := unstructured.NestedMap(o.infra.Object, "spec")
	if err != nil {
		return nil, "", fmt.Errorf("reading the spec of %s %s: %w", o.infra.GetKind(), o.infra.GetName(), err)
	}
	merged, err := mergeJSON(curSpec, tmplSpec)
	if err != nil {
		return nil, "", fmt.Errorf("merging %s %s into the spec of %s %s: %w", ref.Kind, ref.Name, o.infra.GetKind(), o.infra.GetName(), err)
	}
	if len(merged) > 0 {
		o.desiredInfra.Object["spec"] = merged
	}
	o.desiredInfra.SetAnnotations(mergeMaps(o.infra.GetAnnotations(), map[string]string{
		clusterv1.TemplateClonedFromNameAnnotation:      ref.Name,
		clusterv1.TemplateClonedFromGroupKindAnnotation: ref.GroupKind().String(),
	}))
	return o, "", nil
}

// mergeJSON merges patch into base with JSON merge patch semantics (RFC 7386).
func mergeJSON(base, patch map[string]any) (map[string]any, error) {
	if base == nil {
		base = map[string]any{}
	}
	b, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	p, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	out, err := jsonpatch.MergePatch(b, p)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// inPlaceIneligible says why an outdated Machine is not even considered for an in-place update
// ("" when it is), with KubeadmControlPlane's rules: a Machine a user or a MachineHealthCheck
// marked, or one a rollout.after asks to replace, is replaced; and once enough Machines are up to
// date (a surge Machine was created) the outdated one is removed, not updated.
func (s *scope) inPlaceIneligible(m *clusterv1.Machine) string {
	if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
		return fmt.Sprintf("it has the %s annotation", clusterv1.DeleteMachineAnnotation)
	}
	if _, ok := m.Annotations[clusterv1.RemediateMachineAnnotation]; ok {
		return fmt.Sprintf("it has the %s annotation", clusterv1.RemediateMachineAnnotation)
	}
	if s.rolloutAfterExpired(m) {
		return fmt.Sprintf("spec.rollout.after (%s) asks for new Machines", s.kcp.Spec.Rollout.After.UTC().Format(time.RFC3339))
	}
	upToDate := 0
	for _, a := range s.activeMachines() {
		if ok, _ := s.upToDate(a); ok && !updatingInPlace(a) {
			upToDate++
		}
	}
	if upToDate >= s.desiredReplicas() {
		return fmt.Sprintf("%d up-to-date Machines already make the %d replicas", upToDate, s.desiredReplicas())
	}
	return ""
}

// inPlaceProblems are the preflight checks of an in-place update of m: every Machine, m
// included, passes the checks of any other step (an update takes a healthy member down for a
// while, it does not repair a broken one), and etcd keeps quorum while m's member reboots. A
// single-member etcd cannot: a one-replica control plane is down during the update, as during
// any reboot of its node, which is the price of one replica and no spare machine.
func (s *scope) inPlaceProblems(m *clusterv1.Machine) []string {
	return s.withRebootProblems(m, s.preflightProblems(nil))
}

// withRebootProblems adds to problems what m's node going down for its update would break (etcd
// quorum while its member reboots), sorted and without repeats.
func (s *scope) withRebootProblems(m *clusterv1.Machine, problems []string) []string {
	if s.etcd.known() && len(s.etcd.members) > 1 {
		if ok, why := s.quorumWithout(m); !ok {
			problems = append(problems, fmt.Sprintf("updating Machine %s in place takes its etcd member down while the node reboots, which would lose etcd quorum: %s", m.Name, why))
		}
	}
	problems = dedupe(problems)
	slices.Sort(problems)
	return problems
}

// tryInPlaceUpdate updates the outdated Machine a rollout would otherwise delete in place, when
// the feature gate is on, a CanUpdateMachine extension is registered (without one nothing
// differs from a control plane without the gate, not even the status), the Machine is eligible,
// the preflight checks pass and the extension can do every change. handled reports that it
// started the update or waits for the preflight checks; otherwise the caller deletes the
// Machine as it would without in-place updates.
func (r *Reconciler) tryInPlaceUpdate(ctx context.Context, s *scope, m *clusterv1.Machine) (handled bool, _ ctrl.Result, _ error) {
	if !r.inPlaceEnabled() {
		return false, ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))
	handlers, err := r.RuntimeClient.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, m)
	if err != nil {
		return false, ctrl.Result{}, fmt.Errorf("listing the CanUpdateMachine extensions for Machine %s: %w", m.Name, err)
	}
	switch {
	case len(handlers) == 0:
		// No extension: exactly what happens without the gate, with nothing to report.
		log.V(4).Info("No CanUpdateMachine extension is registered, replacing the Machine")
		return false, ctrl.Result{}, nil
	case len(handlers) > 1:
		// As KubeadmControlPlane: patches of several extensions cannot be combined safely.
		return false, ctrl.Result{}, fmt.Errorf("found %d CanUpdateMachine extensions (%s) for Machine %s: only one is supported; remove the others' ExtensionConfigs",
			len(handlers), strings.Join(handlers, ", "), m.Name)
	}
	if why := s.inPlaceIneligible(m); why != "" {
		s.inPlaceDecision("replacing Machine %s, not updating it in place: %s", m.Name, why)
		log.V(2).Info("Not updating the Machine in place", "reason", why)
		return false, ctrl.Result{}, nil
	}

	if problems := s.inPlaceProblems(m); len(problems) > 0 {
		if len(s.preflightProblems(m)) == 0 {
			// Only the Machine itself fails: replacing it repairs it, updating it would not.
			s.inPlaceDecision("replacing Machine %s, not updating it in place: it fails the preflight checks itself: %s", m.Name, strings.Join(problems, "; "))
			return false, ctrl.Result{}, nil
		}
		r.preflightFailed(ctx, s, problems)
		return true, ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
	}

	objs, why, err := r.inPlaceObjectsFor(ctx, s, m)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if why == "" {
		why, err = r.canUpdateMachine(ctx, s, objs, handlers[0])
		if err != nil {
			return false, ctrl.Result{}, err
		}
	}
	if why != "" {
		s.inPlaceDecision("replacing Machine %s, not updating it in place: %s", m.Name, why)
		log.Info("The Machine cannot be updated in place, replacing it", "reason", why)
		return false, ctrl.Result{}, nil
	}
	if err := r.triggerInPlaceUpdate(ctx, s, objs); err != nil {
		return false, ctrl.Result{}, err
	}
	s.inPlaceDecision("updating Machine %s in place", m.Name)
	s.wait("updating Machine %s in place", m.Name)
	return true, ctrl.Result{}, nil
}

// inPlaceDecision records which path the rollout took, for the RollingOut condition.
func (s *scope) inPlaceDecision(format string, args ...any) {
	s.inPlaceMessage = fmt.Sprintf(format, args...)
}

// canUpdateMachine asks the extension whether it can update the Machine in place and returns
// why not ("" when it can): after its patches the current objects must equal the desired ones,
// so that a change it does not know is never left behind.
func (r *Reconciler) canUpdateMachine(ctx context.Context, s *scope, o *inPlaceObjects, handler string) (string, error) {
	req, err := canUpdateMachineRequest(s, o)
	if err != nil {
		return "", fmt.Errorf("building the CanUpdateMachine request for Machine %s: %w", o.machine.Name, err)
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	if err := r.RuntimeClient.CallExtension(ctx, runtimehooksv1.CanUpdateMachine, o.machine, handler, req, resp); err != nil {
		return "", fmt.Errorf("calling CanUpdateMachine extension %s for Machine %s: %w", handler, o.machine.Name, err)
	}
	if err := applyCanUpdatePatches(req, resp); err != nil {
		return "", fmt.Errorf("applying the patches of CanUpdateMachine extension %s to Machine %s: %w", handler, o.machine.Name, err)
	}
	diffs, err := inPlaceDiffs(req)
	if err != nil {
		return "", fmt.Errorf("comparing the objects of Machine %s after the patches of CanUpdateMachine extension %s: %w", o.machine.Name, handler, err)
	}
	if len(diffs) == 0 {
		return "", nil
	}
	why := fmt.Sprintf("extension %s cannot update %s", handler, strings.Join(diffs, ", "))
	if msg := resp.GetMessage(); msg != "" {
		why += " (" + msg + ")"
	}
	return why, nil
}

// canUpdateMachineRequest builds the request: for each object its identity, labels, annotations
// and spec (what Cluster API's KubeadmControlPlane sends). The desired Machine is the current
// one with the desired version and the fields syncMachines keeps in sync, so that fields set
// after creation (providerID, bootstrap.dataSecretName) are no difference.
func canUpdateMachineRequest(s *scope, o *inPlaceObjects) (*runtimehooksv1.CanUpdateMachineRequest, error) {
	desired := o.machine.DeepCopy()
	desired.Spec.Version = o.desiredMachine.Spec.Version
	setMutableMachineSpec(s, desired)
	desired.Labels = mergeMaps(o.machine.Labels, o.desiredMachine.Labels)
	desired.Annotations = mergeMaps(o.machine.Annotations, o.desiredMachine.Annotations)

	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *requestMachine(o.machine)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *requestMachine(desired)},
	}
	var err error
	if req.Current.BootstrapConfig, err = requestConfig(o.config, o.configSpec); err != nil {
		return nil, err
	}
	if req.Desired.BootstrapConfig, err = requestConfig(o.config, o.desiredConfigSpec); err != nil {
		return nil, err
	}
	if req.Current.InfrastructureMachine, err = requestUnstructured(o.infra); err != nil {
		return nil, err
	}
	if req.Desired.InfrastructureMachine, err = requestUnstructured(o.desiredInfra); err != nil {
		return nil, err
	}
	return req, nil
}

func requestMachine(m *clusterv1.Machine) *clusterv1.Machine {
	return &clusterv1.Machine{
		// The extension reads the request as JSON: the kind must be there.
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations,
		},
		Spec: *m.Spec.DeepCopy(),
	}
}

func requestConfig(c *bootstrapv1.KairosConfig, spec *bootstrapv1.KairosConfigSpec) (runtime.RawExtension, error) {
	return toRawExtension(&bootstrapv1.KairosConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KairosConfig"},
		ObjectMeta: metav1.ObjectMeta{
			Name: c.Name, Namespace: c.Namespace, Labels: c.Labels, Annotations: c.Annotations,
		},
		Spec: *spec.DeepCopy(),
	})
}

func requestUnstructured(u *unstructured.Unstructured) (runtime.RawExtension, error) {
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	if spec, ok := u.Object["spec"]; ok {
		out.Object["spec"] = runtime.DeepCopyJSONValue(spec)
	}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetLabels(u.GetLabels())
	out.SetAnnotations(u.GetAnnotations())
	return toRawExtension(out)
}

// toRawExtension encodes obj as JSON, and keeps it as an Unstructured for the comparison.
func toRawExtension(obj any) (runtime.RawExtension, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return runtime.RawExtension{}, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return runtime.RawExtension{}, err
	}
	return runtime.RawExtension{Raw: raw, Object: u}, nil
}

// applyCanUpdatePatches applies the response's patches to the request's current objects. Only
// their spec is taken over, as Cluster API does: an extension answers for specs.
func applyCanUpdatePatches(req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) error {
	if resp.MachinePatch.IsDefined() {
		raw, err := json.Marshal(&req.Current.Machine)
		if err != nil {
			return err
		}
		patched, err := applyPatch(raw, resp.MachinePatch)
		if err != nil {
			return fmt.Errorf("Machine patch: %w", err)
		}
		m := &clusterv1.Machine{}
		if err := json.Unmarshal(patched, m); err != nil {
			return fmt.Errorf("Machine patch: %w", err)
		}
		req.Current.Machine.Spec = m.Spec
	}
	for _, p := range []struct {
		what  string
		obj   *runtime.RawExtension
		patch runtimehooksv1.Patch
	}{
		{"bootstrap config patch", &req.Current.BootstrapConfig, resp.BootstrapConfigPatch},
		{"infrastructure machine patch", &req.Current.InfrastructureMachine, resp.InfrastructureMachinePatch},
	} {
		if !p.patch.IsDefined() {
			continue
		}
		patched, err := applyPatch(p.obj.Raw, p.patch)
		if err != nil {
			return fmt.Errorf("%s: %w", p.what, err)
		}
		after := &unstructured.Unstructured{}
		if err := after.UnmarshalJSON(patched); err != nil {
			return fmt.Errorf("%s: %w", p.what, err)
		}
		cur := p.obj.Object.(*unstructured.Unstructured).DeepCopy()
		if spec, ok := after.Object["spec"]; ok {
			cur.Object["spec"] = spec
		} else {
			delete(cur.Object, "spec")
		}
		if *p.obj, err = toRawExtension(cur); err != nil {
			return err
		}
	}
	return nil
}

func applyPatch(doc []byte, p runtimehooksv1.Patch) ([]byte, error) {
	switch p.PatchType {
	case runtimehooksv1.JSONPatchType:
		ops, err := jsonpatch.DecodePatch(p.Patch)
		if err != nil {
			return nil, fmt.Errorf("decoding the JSON patch: %w", err)
		}
		return ops.Apply(doc)
	case runtimehooksv1.JSONMergePatchType:
		return jsonpatch.MergePatch(doc, p.Patch)
	default:
		return nil, fmt.Errorf("unknown patch type %q", p.PatchType)
	}
}

// inPlaceDiffs names what still differs between the (patched) current and the desired objects of
// a request, by top-level spec field. Machine fields an in-place update never changes, or that
// syncMachines keeps in sync anyway, are left out (Cluster API's inplace.CleanupMachineSpecForDiff).
func inPlaceDiffs(req *runtimehooksv1.CanUpdateMachineRequest) ([]string, error) {
	var out []string
	cur, err := toSpecMap(comparableMachineSpec(&req.Current.Machine.Spec))
	if err != nil {
		return nil, err
	}
	des, err := toSpecMap(comparableMachineSpec(&req.Desired.Machine.Spec))
	if err != nil {
		return nil, err
	}
	for _, f := range specDiff(cur, des) {
		out = append(out, "Machine spec."+f)
	}
	for _, p := range []struct {
		what             string
		current, desired runtime.RawExtension
	}{
		{"KairosConfig", req.Current.BootstrapConfig, req.Desired.BootstrapConfig},
		{"", req.Current.InfrastructureMachine, req.Desired.InfrastructureMachine},
	} {
		c, ok1 := p.current.Object.(*unstructured.Unstructured)
		d, ok2 := p.desired.Object.(*unstructured.Unstructured)
		if !ok1 || !ok2 {
			return nil, errors.New("the request's objects are not unstructured")
		}
		what := p.what
		if what == "" {
			what = d.GetKind()
		}
		cs, _ := c.Object["spec"].(map[string]any)
		ds, _ := d.Object["spec"].(map[string]any)
		for _, f := range specDiff(cs, ds) {
			out = append(out, what+" spec."+f)
		}
	}
	return out, nil
}

func comparableMachineSpec(spec *clusterv1.MachineSpec) *clusterv1.MachineSpec {
	spec = spec.DeepCopy()
	spec.ClusterName = ""
	spec.Bootstrap = clusterv1.Bootstrap{}
	spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{}
	spec.ProviderID = ""
	spec.MinReadySeconds = nil
	spec.ReadinessGates = nil
	spec.Deletion = clusterv1.MachineDeletionSpec{}
	spec.Taints = nil
	return spec
}

func toSpecMap(spec any) (map[string]any, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(raw, &m)
}

// specDiff lists the top-level fields that differ between two specs, sorted.
func specDiff(a, b map[string]any) []string {
	var out []string
	for k := range sets.KeySet(a).Union(sets.KeySet(b)) {
		if !reflect.DeepEqual(a[k], b[k]) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// triggerInPlaceUpdate starts the in-place update of a Machine, in the contract's order: the
// update-in-progress annotation on the Machine first (from then on the update is completed,
// never decided again), then the desired infrastructure machine, KairosConfig and Machine, each
// with the annotation, then the UpdateMachine hook marked pending, which hands the Machine to
// Cluster API's Machine controller. Every step writes only what is missing, so a reconciliation
// interrupted anywhere is completed by the next one (completeInPlaceUpdateTriggers).
//
// The annotations are written with merge patches, not server-side apply, as KubeadmControlPlane
// does: the Machine controller removes them when done, and an apply that kept them would race
// with it.
func (r *Reconciler) triggerInPlaceUpdate(ctx context.Context, s *scope, o *inPlaceObjects) error {
	m := o.machine
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KObj(m))
	machineRV := capicontrollerutil.StructuredObject(clusterv1.GroupVersion, "Machine")

	if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok {
		log.Info("Starting the in-place update of the Machine")
		before := m.DeepCopy()
		m.Annotations = mergeMaps(m.Annotations, map[string]string{clusterv1.UpdateInProgressAnnotation: ""})
		if err := r.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("starting the in-place update of Machine %s (annotation %s): %w", m.Name, clusterv1.UpdateInProgressAnnotation, err)
		}
		// The next reconciliation must see the annotation, or it could start another update.
		r.controller.DeferNextReconcileUntilCacheUpToDate(s.kcp, machineRV, m.ResourceVersion)
	}

	// The infrastructure machine first: the write most likely to be refused (its provider's
	// webhook), before anything else changed.
	desiredInfra := o.desiredInfra.DeepCopy()
	desiredInfra.SetAnnotations(mergeMaps(desiredInfra.GetAnnotations(), map[string]string{clusterv1.UpdateInProgressAnnotation: ""}))
	if !equality.Semantic.DeepEqual(o.infra.Object, desiredInfra.Object) {
		if err := r.Client.Patch(ctx, desiredInfra, client.MergeFrom(o.infra)); err != nil {
			return fmt.Errorf("writing the desired %s %s of Machine %s for its in-place update: %w", o.infra.GetKind(), o.infra.GetName(), m.Name, err)
		}
	}

	if err := r.writeInPlaceConfig(ctx, o); err != nil {
		return err
	}

	if m.Spec.Version != o.desiredMachine.Spec.Version || machineNeedsApply(m, o.desiredMachine) {
		desired := o.desiredMachine.DeepCopy()
		if err := r.applyMachine(ctx, desired); err != nil {
			return fmt.Errorf("writing the desired Machine %s for its in-place update: %w", m.Name, err)
		}
		m.ResourceVersion = desired.ResourceVersion
	}

	before := m.DeepCopy()
	if markHookPending(m, updateMachineHook) {
		if err := r.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("handing Machine %s to Cluster API for its in-place update (annotation %s): %w", m.Name, runtimev1.PendingHooksAnnotation, err)
		}
		r.controller.DeferNextReconcileUntilCacheUpToDate(s.kcp, machineRV, m.ResourceVersion)
		log.Info("Handed the Machine to Cluster API for its in-place update", "version", o.desiredMachine.Spec.Version)
		if r.Recorder != nil {
			r.Recorder.Eventf(m, corev1.EventTypeNormal, "SuccessfulStartInPlaceUpdate", "Machine starting in-place update to version %s", o.desiredMachine.Spec.Version)
		}
	}
	return nil
}

// writeInPlaceConfig writes the desired KairosConfig: the top-level spec fields that differ from
// what the control plane asks for (the only ones the bootstrap provider's webhook lets change
// once the data exists are those the extension updates in place), and the update-in-progress
// annotation, under the control plane's field manager when the KairosConfig records which fields
// the control plane set (ownedFields), so that the record stays complete.
func (r *Reconciler) writeInPlaceConfig(ctx context.Context, o *inPlaceObjects) error {
	have, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.configSpec)
	if err != nil {
		return err
	}
	want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.desiredConfigSpec)
	if err != nil {
		return err
	}
	changed := specDiff(have, want)
	_, annotated := o.config.Annotations[clusterv1.UpdateInProgressAnnotation]
	if len(changed) == 0 && annotated {
		return nil
	}
	live, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o.config.Spec)
	if err != nil {
		return err
	}
	for _, f := range changed {
		if v, ok := want[f]; ok {
			live[f] = v
		} else {
			delete(live, f)
		}
	}
	config := o.config.DeepCopy()
	config.Spec = bootstrapv1.KairosConfigSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live, &config.Spec); err != nil {
		return err
	}
	config.Annotations = mergeMaps(config.Annotations, map[string]string{clusterv1.UpdateInProgressAnnotation: ""})
	var opts []client.PatchOption
	if o.configOwned {
		// Only then: a first record of the control plane's fields holding just these would make
		// the KairosConfig look changed in every other field (it is compared whole without one).
		opts = append(opts, client.FieldOwner(fieldManager))
	}
	if err := r.Client.Patch(ctx, config, client.MergeFrom(o.config), opts...); err != nil {
		return fmt.Errorf("writing the desired KairosConfig %s (spec %s) of Machine %s for its in-place update: %w",
			config.Name, strings.Join(changed, ", "), o.machine.Name, err)
	}
	return nil
}

// completeInPlaceUpdateTriggers completes the in-place updates a previous reconciliation started
// but could not hand to Cluster API (it failed or stopped after the update-in-progress
// annotation): the decision is not taken again, the CanUpdateMachine extension is not asked
// again.
func (r *Reconciler) completeInPlaceUpdateTriggers(ctx context.Context, s *scope) (ctrl.Result, error) {
	for _, m := range s.machines.Filter(collections.Not(collections.HasDeletionTimestamp), inPlaceTriggerIncomplete).SortedByCreationTimestamp() {
		objs, why, err := r.inPlaceObjectsFor(ctx, s, m)
		if err != nil {
			return ctrl.Result{}, err
		}
		if why != "" {
			s.wait("cannot complete the in-place update of Machine %s: %s", m.Name, why)
			return ctrl.Result{RequeueAfter: requeueWhileBusy}, nil
		}
		ctrl.LoggerFrom(ctx).Info("Completing the start of an in-place update", "Machine", klog.KObj(m))
		if err := r.triggerInPlaceUpdate(ctx, s, objs); err != nil {
			return ctrl.Result{}, err
		}
		s.wait("updating Machine %s in place", m.Name)
	}
	return ctrl.Result{}, nil
}
