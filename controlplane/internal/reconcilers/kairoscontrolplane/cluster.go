package kairoscontrolplane

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// kubeconfigUser is the identity of the management cluster in the workload cluster.
const kubeconfigUser = "kairos-capi-admin"

func (s *scope) ownerRef() metav1.OwnerReference {
	return *metav1.NewControllerRef(s.kcp, controlplanev1.GroupVersion.WithKind("KairosControlPlane"))
}

// reconcileCertificates makes sure the cluster certificates (and the k3s cluster token)
// exist before any Machine does, owned by the control plane.
func (r *Reconciler) reconcileCertificates(ctx context.Context, s *scope) (ctrl.Result, error) {
	caPair, err := clustersecret.LookupOrGeneratePKI(ctx, r.Client, s.clusterKey(), s.ownerRef())
	if err != nil {
		s.certificatesErr = err
		return ctrl.Result{}, fmt.Errorf("reconciling cluster certificates: %w", err)
	}
	if s.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
		if _, err := clustersecret.LookupOrGenerateK3sToken(ctx, r.Client, s.clusterKey(), caPair.ClusterCA.Cert, s.ownerRef()); err != nil {
			s.certificatesErr = err
			return ctrl.Result{}, fmt.Errorf("reconciling the k3s cluster token: %w", err)
		}
	}
	return ctrl.Result{}, nil
}

// reconcilePrerequisites waits for the Cluster's infrastructure and endpoint, and stops at a
// virtual IP that is not the endpoint: the nodes would hold an address no one connects to.
func (r *Reconciler) reconcilePrerequisites(_ context.Context, s *scope) (ctrl.Result, error) {
	switch {
	case !ptr.Deref(s.cluster.Status.Initialization.InfrastructureProvisioned, false):
		s.halt("waiting for Cluster %s infrastructure to be provisioned", s.cluster.Name)
	case !s.cluster.Spec.ControlPlaneEndpoint.IsValid():
		s.halt("waiting for Cluster %s spec.controlPlaneEndpoint", s.cluster.Name)
	case s.baseConfig != nil && s.baseConfig.VirtualIP != nil && !sameIP(s.baseConfig.VirtualIP.Address, s.cluster.Spec.ControlPlaneEndpoint.Host):
		field := "spec.kairosConfigSpec.virtualIP.address"
		if ref := s.kcp.Spec.KairosConfigTemplate; ref != nil {
			field = "KairosConfigTemplate " + ref.Name + " spec.template.spec.virtualIP.address"
		}
		s.halt("the virtual IP %s (%s) is not Cluster %s spec.controlPlaneEndpoint.host %s: set the endpoint host (on the Cluster or its infrastructure cluster) to the virtual IP",
			s.baseConfig.VirtualIP.Address, field, s.cluster.Name, s.cluster.Spec.ControlPlaneEndpoint.Host)
	}
	return ctrl.Result{}, nil
}

func sameIP(a, b string) bool {
	ip := net.ParseIP(a)
	return ip != nil && ip.Equal(net.ParseIP(b))
}

// reconcileKubeconfig writes <cluster>-kubeconfig from the cluster CA with a short-lived client
// certificate, and rotates it once half of its lifetime is left (a one-year certificate after six months, as kubeadm's control plane does). Nodes never send anything
// back: the management cluster holds the CA, so it can always mint its own credentials.
func (r *Reconciler) reconcileKubeconfig(ctx context.Context, s *scope) (ctrl.Result, error) {
	validity := time.Duration(ptr.Deref(s.kcp.Spec.Kubeconfig.ClientCertificateValiditySeconds, controlplanev1.DefaultClientCertificateValiditySeconds)) * time.Second
	key := client.ObjectKey{Namespace: s.cluster.Namespace, Name: secret.Name(s.cluster.Name, secret.Kubeconfig)}
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, existing)
	}
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading the kubeconfig Secret: %w", err)
	}

	rotateAt := time.Time{}
	if existing != nil {
		notAfter, err := kubeconfigNotAfter(existing.Data[secret.KubeconfigDataName])
		if err == nil {
			rotateAt = notAfter.Add(-validity / 2)
		}
		if err == nil && s.reconcileTime.Before(rotateAt) && kubeconfigMetadataCurrent(existing, s) {
			return ctrl.Result{RequeueAfter: rotateAt.Sub(s.reconcileTime)}, nil
		}
	}

	ca, err := clustersecret.LookupPKI(ctx, r.Client, s.clusterKey())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the cluster CA: %w", err)
	}
	clientPair, err := ca.ClusterCA.SignClient(kubeconfigUser, []string{"system:masters"}, validity)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("signing the kubeconfig client certificate: %w", err)
	}
	ep := s.cluster.Spec.ControlPlaneEndpoint
	server := "https://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	data, err := pki.Kubeconfig(s.cluster.Name, server, ca.ClusterCA.Cert, kubeconfigUser, clientPair)
	if err != nil {
		return ctrl.Result{}, err
	}

	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Type:       clusterv1.ClusterSecretType,
	}
	desired.Labels = mergeMaps(s.kcp.Spec.Kubeconfig.ObjectMeta.Labels, map[string]string{clusterv1.ClusterNameLabel: s.cluster.Name})
	desired.Annotations = s.kcp.Spec.Kubeconfig.ObjectMeta.Annotations
	desired.OwnerReferences = []metav1.OwnerReference{s.ownerRef()}
	desired.Data = map[string][]byte{secret.KubeconfigDataName: data}
	if existing == nil {
		if err := r.Client.Create(ctx, desired); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating the kubeconfig Secret: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("Created the kubeconfig Secret", "Secret", klog.KObj(desired))
		return ctrl.Result{RequeueAfter: validity / 2}, nil
	}
	patch := client.MergeFrom(existing.DeepCopy())
	existing.Labels = mergeMaps(existing.Labels, desired.Labels)
	existing.Annotations = mergeMaps(existing.Annotations, desired.Annotations)
	existing.OwnerReferences = []metav1.OwnerReference{s.ownerRef()}
	existing.Data = desired.Data
	if err := r.Client.Patch(ctx, existing, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("rotating the kubeconfig Secret: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Rotated the kubeconfig client certificate", "Secret", klog.KObj(existing))
	// Come back when the new certificate needs rotating: no other event may arrive before.
	return ctrl.Result{RequeueAfter: validity / 2}, nil
}

// kubeconfigMetadataCurrent reports whether the Secret carries the metadata the spec asks for.
func kubeconfigMetadataCurrent(existing *corev1.Secret, s *scope) bool {
	for k, v := range s.kcp.Spec.Kubeconfig.ObjectMeta.Labels {
		if existing.Labels[k] != v {
			return false
		}
	}
	for k, v := range s.kcp.Spec.Kubeconfig.ObjectMeta.Annotations {
		if existing.Annotations[k] != v {
			return false
		}
	}
	return metav1.IsControlledBy(existing, s.kcp)
}

// kubeconfigNotAfter returns when the client certificate of a kubeconfig expires.
func kubeconfigNotAfter(data []byte) (time.Time, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return time.Time{}, err
	}
	for _, auth := range cfg.AuthInfos {
		if len(auth.ClientCertificateData) > 0 {
			return pki.CertificateNotAfter(auth.ClientCertificateData)
		}
	}
	return time.Time{}, fmt.Errorf("kubeconfig has no client certificate")
}

// reconcileInitialized reports the control plane initialized once a control-plane Machine's
// node is registered in the workload cluster: its API server then accepts requests.
func (r *Reconciler) reconcileInitialized(_ context.Context, s *scope) (ctrl.Result, error) {
	if !s.initialized() && s.machines.Filter(collections.HasNode()).Len() > 0 {
		s.kcp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}
	return ctrl.Result{}, nil
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

// reconcileTemplateOwnership makes the Cluster own the templates the control plane clones from
// (the infrastructure machine template and the KairosConfigTemplate), as Cluster API's kubeadm
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
