package kairosconfig

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// configOwner is the Machine or MachinePool a KairosConfig bootstraps.
type configOwner struct {
	machine *clusterv1.Machine
	pool    *clusterv1.MachinePool
}

// getConfigOwner returns the owner named by the config's owner references, or nil when Cluster
// API has not set one yet.
func getConfigOwner(ctx context.Context, c client.Client, config *bootstrapv1.KairosConfig) (*configOwner, error) {
	for _, ref := range config.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != clusterv1.GroupVersion.Group {
			continue
		}
		key := client.ObjectKey{Namespace: config.Namespace, Name: ref.Name}
		switch ref.Kind {
		case "Machine":
			m := &clusterv1.Machine{}
			if err := c.Get(ctx, key, m); err != nil {
				return nil, fmt.Errorf("getting owner Machine: %w", err)
			}
			return &configOwner{machine: m}, nil
		case "MachinePool":
			p := &clusterv1.MachinePool{}
			if err := c.Get(ctx, key, p); err != nil {
				return nil, fmt.Errorf("getting owner MachinePool: %w", err)
			}
			return &configOwner{pool: p}, nil
		}
	}
	return nil, nil
}

func (o *configOwner) object() client.Object {
	if o.pool != nil {
		return o.pool
	}
	return o.machine
}

func (o *configOwner) kind() string {
	if o.pool != nil {
		return "MachinePool"
	}
	return "Machine"
}

func (o *configOwner) clusterName() string {
	if o.pool != nil {
		return o.pool.Spec.ClusterName
	}
	return o.machine.Spec.ClusterName
}

func (o *configOwner) version() string {
	if o.pool != nil {
		return o.pool.Spec.Template.Spec.Version
	}
	return o.machine.Spec.Version
}

func (o *configOwner) dataSecretName() string {
	if o.pool != nil {
		return ptr.Deref(o.pool.Spec.Template.Spec.Bootstrap.DataSecretName, "")
	}
	return ptr.Deref(o.machine.Spec.Bootstrap.DataSecretName, "")
}

// needsJoinToken reports whether a generated join token must be kept valid: a Machine needs
// it until its node joined; a MachinePool can add nodes at any time.
func (o *configOwner) needsJoinToken() bool {
	if o.pool != nil {
		return true
	}
	return !o.machine.Status.NodeRef.IsDefined()
}
