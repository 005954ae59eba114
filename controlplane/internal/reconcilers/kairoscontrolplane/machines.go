package kairoscontrolplane

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util/contract"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/labels/format"

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
	if s.restoresFromSnapshot() {
		config.Spec.EtcdSnapshots.Restore = bootstrapv1.EtcdSnapshotRestoreNewest
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
