package kairoscontrolplane

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
)

// reconcileTemplateOwnership makes the Cluster own the templates the control plane clones from
// (the infrastructure machine template and the KairosConfigTemplate) and the Secrets of the
// cluster its KairosConfigSpec references, as Cluster API's kubeadm
// control plane and MachineDeployment controllers do: deleting the Cluster then deletes them
// through the garbage collector instead of leaving them behind.
func (r *Reconciler) reconcileTemplateOwnership(ctx context.Context, s *scope) (ctrl.Result, error) {
	owner := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: s.cluster.Name, UID: s.cluster.UID}
	var objs []client.Object
	if ref := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef; strings.HasSuffix(ref.Kind, clusterv1.TemplateSuffix) {
		infra, err := external.GetObjectFromContractVersionedRef(ctx, r.Client, ref, s.kcp.Namespace)
		switch {
		case apierrors.IsNotFound(err):
			s.infraTemplateErr = fmt.Sprintf("%s %s does not exist", ref.Kind, ref.Name)
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
		default:
			objs = append(objs, infra)
		}
	}
	if ref := s.kcp.Spec.KairosConfigTemplate; ref != nil {
		tmpl := &bootstrapv1.KairosConfigTemplate{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.kcp.Namespace, Name: ref.Name}, tmpl)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading KairosConfigTemplate %s: %w", ref.Name, err)
		}
		if err == nil {
			objs = append(objs, tmpl)
		}
	}
	// The Secrets the control plane's KairosConfigSpec references (the flavors' login password,
	// files, manifests, ...) that the user labelled as this cluster's
	// (cluster.x-k8s.io/cluster-name, as every flavor's login Secret is and as clusterctl move
	// follows): the Cluster owns them too, or deleting the Cluster leaves them behind (found
	// through CAPV, test/vsphere: the only object of a deleted vSphere-flavor cluster left was its
	// kairos-login Secret). A Secret without that label, or labelled for another cluster, stays
	// the user's: it may be shared, and deleting it with one cluster would break the others. The
	// workers' KairosConfigTemplate of the flavors references the same Secret.
	for _, ref := range userdata.References(&s.kcp.Spec.KairosConfigSpec) {
		secret := &corev1.Secret{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.kcp.Namespace, Name: ref.Name}, secret)
		switch {
		case apierrors.IsNotFound(err):
			// The KairosConfigs say that it is missing.
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
		case secret.Labels[clusterv1.ClusterNameLabel] == s.cluster.Name:
			objs = append(objs, secret)
		}
	}
	for _, o := range objs {
		if util.HasExactOwnerRef(o.GetOwnerReferences(), owner) {
			continue
		}
		var before client.Object
		if u, ok := o.(*unstructured.Unstructured); ok {
			before = u.DeepCopy()
		} else {
			before = o.DeepCopyObject().(client.Object)
		}
		o.SetOwnerReferences(util.EnsureOwnerRef(o.GetOwnerReferences(), owner))
		if err := r.Client.Patch(ctx, o, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("making Cluster %s the owner of %s: %w", s.cluster.Name, o.GetName(), err)
		}
	}
	return ctrl.Result{}, nil
}
