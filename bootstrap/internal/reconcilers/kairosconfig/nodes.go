package kairosconfig

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/controllers/clustercache"
)

// WorkloadNodes gives workload Nodes their Machines' provider IDs.
type WorkloadNodes interface {
	// SetProviderID writes id into the spec.providerID of the Node called name when it has
	// none, and returns the provider ID the Node carries afterwards: id, or the one it had.
	// A missing Node is a NotFound error.
	SetProviderID(ctx context.Context, cluster client.ObjectKey, name, id string) (string, error)
}

// clusterCacheNodes reads Nodes through the ClusterCache's cached client: Cluster API's
// Machine controller watches the workload cluster's Nodes already, so the informer is shared
// and waiting for a Node costs no request.
type clusterCacheNodes struct {
	cache clustercache.ClusterCache
}

func (c clusterCacheNodes) SetProviderID(ctx context.Context, cluster client.ObjectKey, name, id string) (string, error) {
	remote, err := c.cache.GetClient(ctx, cluster)
	if err != nil {
		return "", err
	}
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return "", err
	}
	if node.Spec.ProviderID != "" {
		return node.Spec.ProviderID, nil
	}
	// The API server refuses to change a provider ID once set; a patch carrying the
	// resourceVersion also refuses to race another writer (k3s' cloud controller).
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.ProviderID = id
	if err := remote.Patch(ctx, node, patch); err != nil {
		return "", err
	}
	return id, nil
}

// offlineNodes stands in for a workload cluster in the preview: every Node takes the ID.
type offlineNodes struct{}

func (offlineNodes) SetProviderID(_ context.Context, _ client.ObjectKey, _, id string) (string, error) {
	return id, nil
}
