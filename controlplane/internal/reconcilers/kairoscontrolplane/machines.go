package kairoscontrolplane

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/contract"
	"sigs.k8s.io/cluster-api/util/patch"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// machineLabels are the labels of every object of a control-plane Machine.
func machineLabels(s *scope) map[string]string {
	return mergeMaps(s.kcp.Spec.MachineTemplate.ObjectMeta.Labels, map[string]string{
		clusterv1.ClusterNameLabel:           s.cluster.Name,
		clusterv1.MachineControlPlaneLabel:   "",
		controlplanev1.ControlPlaneNameLabel: s.kcp.Name,
	})
}

// createMachine creates a control-plane Machine with its infrastructure machine (cloned from
// the template, whatever its kind) and its KairosConfig. The etcd-member pre-terminate hook is
// set from the start, so no Machine can go away without leaving etcd first.
func (r *Reconciler) createMachine(ctx context.Context, s *scope, failureDomain string, extraAnnotations map[string]string) error {
	name, err := controlplanev1.MachineName(s.kcp.Spec.MachineNaming.Template, s.cluster.Name, s.kcp.Name, rand.String(5))
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

	templateRef := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	apiVersion, err := apiVersionFor(ctx, r.Client, templateRef.GroupKind())
	if err != nil {
		s.infraTemplateErr = err.Error()
		return err
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
		return fmt.Errorf("cloning the infrastructure template %s %s: %w", templateRef.Kind, templateRef.Name, err)
	}

	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.kcp.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: *s.desiredConfig(),
	}
	if err := r.Client.Create(ctx, config); err != nil {
		return kerrors.NewAggregate([]error{fmt.Errorf("creating KairosConfig %s: %w", name, err), r.cleanup(ctx, infra)})
	}

	spec := s.kcp.Spec.MachineTemplate.Spec
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
			ReadinessGates:    spec.ReadinessGates,
			Deletion:          machineDeletion(s),
			// A control-plane Machine is available as soon as it is ready.
			MinReadySeconds: ptr.To[int32](0),
		},
	}
	if err := r.Client.Create(ctx, machine); err != nil {
		return kerrors.NewAggregate([]error{fmt.Errorf("creating Machine %s: %w", name, err), r.cleanup(ctx, infra, config)})
	}
	ctrl.LoggerFrom(ctx).Info("Created control-plane Machine", "Machine", klog.KObj(machine), "failureDomain", failureDomain)
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
// the last version listed for v1beta1. (Cluster API's own helper for this is internal.)
func apiVersionFor(ctx context.Context, c client.Reader, gk schema.GroupKind) (string, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
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

// syncMachines propagates what may change without a rollout (metadata, deletion timeouts,
// readiness gates) to existing Machines and their KairosConfigs and infrastructure machines,
// and sets each Machine's UpToDate condition.
func (r *Reconciler) syncMachines(ctx context.Context, s *scope) (ctrl.Result, error) {
	labels := machineLabels(s)
	annotations := s.kcp.Spec.MachineTemplate.ObjectMeta.Annotations
	for _, m := range s.machines {
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		helper, err := patch.NewHelper(m, r.Client)
		if err != nil {
			return ctrl.Result{}, err
		}
		m.Labels = mergeMaps(m.Labels, labels)
		m.Annotations = mergeMaps(m.Annotations, annotations)
		m.Spec.Deletion = machineDeletion(s)
		m.Spec.ReadinessGates = s.kcp.Spec.MachineTemplate.Spec.ReadinessGates
		m.Spec.MinReadySeconds = ptr.To[int32](0)
		ok, reasons := s.upToDate(m)
		cond := metav1.Condition{Type: clusterv1.MachineUpToDateCondition, Status: metav1.ConditionTrue, Reason: clusterv1.MachineUpToDateReason}
		if !ok {
			cond = metav1.Condition{Type: clusterv1.MachineUpToDateCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.MachineNotUpToDateReason, Message: "* " + strings.Join(reasons, "\n* ")}
		}
		conditions.Set(m, cond)
		if err := helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineUpToDateCondition}}); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating Machine %s: %w", m.Name, err)
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

// infraMachine reads a Machine's infrastructure machine, or nil when it does not exist (yet).
func (r *Reconciler) infraMachine(ctx context.Context, m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	ref := m.Spec.InfrastructureRef
	apiVersion, err := apiVersionFor(ctx, r.Client, ref.GroupKind())
	if err != nil {
		return nil, err
	}
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(apiVersion)
	infra.SetKind(ref.Kind)
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, infra)
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
