package kairoscontrolplane

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

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
