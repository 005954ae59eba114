package kairoscontrolplane

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// kubeconfigUser is the identity of the management cluster in the workload cluster.
const kubeconfigUser = "kairos-capi-admin"

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
	data, err := kubeconfigData(s.cluster.Name, server, ca.ClusterCA.Cert, clientPair)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the kubeconfig: %w", err)
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

// kubeconfigNotAfter returns when the client certificate of a kubeconfig expires. Cluster API's
// util/kubeconfig.NeedsClientCertRotation answers only whether a certificate expires within a
// threshold; the control plane also needs when it will, to come back exactly then (no event
// brings it back before), so it reads the expiry itself.
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

// kubeconfigData is the kubeconfig of <cluster>-kubeconfig: the cluster entry is named after the
// Cluster, the user kubeconfigUser and the context "<user>@<cluster>", as Cluster API names them.
func kubeconfigData(clusterName, server string, caCert []byte, client *pki.KeyPair) ([]byte, error) {
	context := kubeconfigUser + "@" + clusterName
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{clusterName: {Server: server, CertificateAuthorityData: caCert}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{kubeconfigUser: {ClientCertificateData: client.Cert, ClientKeyData: client.Key}},
		Contexts:       map[string]*clientcmdapi.Context{context: {Cluster: clusterName, AuthInfo: kubeconfigUser}},
		CurrentContext: context,
	})
}
