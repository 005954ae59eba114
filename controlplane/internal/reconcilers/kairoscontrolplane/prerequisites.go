package kairoscontrolplane

import (
	"context"
	"net"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/util/collections"
)

// reconcilePrerequisites waits for the Cluster's infrastructure and endpoint, and stops at a
// virtual IP that is not the endpoint: the nodes would hold an address no one connects to.
func (r *Reconciler) reconcilePrerequisites(_ context.Context, s *scope) (ctrl.Result, error) {
	switch {
	case !ptr.Deref(s.cluster.Status.Initialization.InfrastructureProvisioned, false):
		s.wait("waiting for Cluster %s infrastructure to be provisioned", s.cluster.Name)
	case !s.cluster.Spec.ControlPlaneEndpoint.IsValid():
		s.wait("waiting for Cluster %s spec.controlPlaneEndpoint", s.cluster.Name)
	case s.baseConfig != nil && s.baseConfig.VirtualIP != nil && !sameIP(s.baseConfig.VirtualIP.Address, s.cluster.Spec.ControlPlaneEndpoint.Host):
		field := "spec.kairosConfigSpec.virtualIP.address"
		if ref := s.kcp.Spec.KairosConfigTemplate; ref != nil {
			field = "KairosConfigTemplate " + ref.Name + " spec.template.spec.virtualIP.address"
		}
		s.wait("the virtual IP %s (%s) is not Cluster %s spec.controlPlaneEndpoint.host %s: set the endpoint host (on the Cluster or its infrastructure cluster) to the virtual IP",
			s.baseConfig.VirtualIP.Address, field, s.cluster.Name, s.cluster.Spec.ControlPlaneEndpoint.Host)
	}
	return ctrl.Result{}, nil
}

func sameIP(a, b string) bool {
	ip := net.ParseIP(a)
	return ip != nil && ip.Equal(net.ParseIP(b))
}

// reconcileInitialized reports the control plane initialized once its API server accepts
// requests, the contract's definition (KubeadmControlPlane looks for its kubeadm-config
// ConfigMap): Cluster API's ClusterCache probes it successfully, or a control-plane Machine's
// node registered. Waiting for a Node alone is not enough: Cluster API's Machine controller
// watches the workload cluster's Nodes only once the Cluster is initialized
// (core/reconcilers/machine watchClusterNodes), so until then the first Machine gets its
// nodeRef only if some other Machine event follows the Node's provider ID reaching its cache;
// v0.1.0 waited for the nodeRef, and its first Machine stayed without one for as long as no
// event came (TestMixedVersions). As with KubeadmControlPlane, a Machine that is deleting or
// to be remediated does not count: its replacement would otherwise join a cluster whose only
// member is going away instead of initializing it.
func (r *Reconciler) reconcileInitialized(_ context.Context, s *scope) (ctrl.Result, error) {
	if s.initialized() {
		return ctrl.Result{}, nil
	}
	staying := s.machines.Filter(collections.Not(collections.HasDeletionTimestamp), collections.Not(collections.IsUnhealthyAndOwnerRemediated))
	if s.machines.Filter(collections.HasNode()).Len() > 0 || s.apiServed && staying.Len() > 0 {
		s.kcp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}
	return ctrl.Result{}, nil
}
