package kairoscontrolplane

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// reconcileOrphans deletes what a Machine creation cut short left behind: a KairosConfig or an
// infrastructure machine this control plane created whose Machine was never created (the
// manager was killed between the creates; createMachine cleans up after errors it sees).
//
// Such an object is owned by the control plane and controlled by no Machine (Cluster API's
// Machine controller takes control of both once the Machine exists), and no Machine has its
// name. A creation happens within one reconciliation, and the next one waits until the cache
// has the new Machine (DeferNextReconcileUntilCacheUpToDate), so at the start of a
// reconciliation no creation is half done unless it was cut short.
func (r *Reconciler) reconcileOrphans(ctx context.Context, s *scope) (ctrl.Result, error) {
	selector := client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name, controlplanev1.ControlPlaneNameLabel: controlPlaneNameLabelValue(s.kcp)}
	configs := &bootstrapv1.KairosConfigList{}
	if err := r.Client.List(ctx, configs, client.InNamespace(s.kcp.Namespace), selector); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the control plane's KairosConfigs: %w", err)
	}
	var orphans []client.Object
	for i := range configs.Items {
		if s.isOrphan(&configs.Items[i]) {
			orphans = append(orphans, &configs.Items[i])
		}
	}
	// Infrastructure machines are of the kind the template clones into, in the version the
	// contract resolves (Cluster API names the clone's kind after the template's).
	ref := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	apiVersion, err := apiVersionFor(ctx, r.Client, ref.GroupKind())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("looking for infrastructure machines left without their Machine: %w", err)
	}
	infras := &unstructured.UnstructuredList{}
	infras.SetAPIVersion(apiVersion)
	infras.SetKind(strings.TrimSuffix(ref.Kind, clusterv1.TemplateSuffix) + "List")
	if err := r.Client.List(ctx, infras, client.InNamespace(s.kcp.Namespace), selector); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the control plane's infrastructure machines: %w", err)
	}
	for i := range infras.Items {
		if s.isOrphan(&infras.Items[i]) {
			orphans = append(orphans, &infras.Items[i])
		}
	}
	for _, o := range orphans {
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting %s %s, left without its Machine: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted an object a cut-short Machine creation left behind", "kind", o.GetObjectKind().GroupVersionKind().Kind, "object", klog.KObj(o))
	}
	return ctrl.Result{}, nil
}

// isOrphan tells whether an object is owned by the control plane, not controlled by a Machine,
// and named after no Machine of the control plane.
func (s *scope) isOrphan(o client.Object) bool {
	if metav1.GetControllerOf(o) != nil {
		return false
	}
	owned := false
	for _, ref := range o.GetOwnerReferences() {
		owned = owned || ref.UID == s.kcp.UID
	}
	_, hasMachine := s.machines[o.GetName()]
	return owned && !hasMachine
}
