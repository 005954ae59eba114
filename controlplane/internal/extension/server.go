package extension

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
)

// Names of the extension handlers. Cluster API registers each as <name>.<ExtensionConfig name>,
// and serves it at /hooks.runtime.cluster.x-k8s.io/v1alpha1/<hook>/<name>.
const (
	CanUpdateMachineHandler    = "kairos-can-update-machine"
	CanUpdateMachineSetHandler = "kairos-can-update-machineset"
	UpdateMachineHandler       = "kairos-update-machine"
)

// DiscoveryPath is the runtime SDK discovery endpoint the handlers are announced at.
const DiscoveryPath = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery"

// Register serves the extension on the manager's webhook server: the HTTPS server, port, Service
// and cert-manager certificate that already serve the admission webhooks.
//
// Why not a runtime server of its own (exp/runtime/server.New with another port): that would need
// a second port, Service and Certificate in control-plane-components.yaml for nothing. The runtime
// SDK's paths (/hooks.runtime.cluster.x-k8s.io/...) cannot collide with controller-gen's
// admission paths (/mutate-..., /validate-...), the implement-extensions guide explicitly allows "a
// dedicated or a shared HTTPS Server", and cluster-api's own server is a controller-runtime
// webhook.Server underneath. So the extension uses cluster-api's exp/runtime/server for what it is
// good at (the catalog, request decoding, the discovery handler) but hands its routes to the
// manager's server: runtime.Server embeds the webhook.Server it registers on, which is replaced
// here by the manager's, with Start reduced to registration (the manager starts the server).
//
// Register must be called before the manager starts (as webhooks are set up).
func Register(ctx context.Context, ws webhook.Server, h *Handlers) error {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	rs, err := server.New(server.Options{Catalog: catalog})
	if err != nil {
		return err
	}
	rs.Server = registerOnly{ws}
	for _, eh := range []server.ExtensionHandler{
		{Hook: runtimehooksv1.CanUpdateMachine, Name: CanUpdateMachineHandler, HandlerFunc: h.CanUpdateMachine},
		{Hook: runtimehooksv1.CanUpdateMachineSet, Name: CanUpdateMachineSetHandler, HandlerFunc: h.CanUpdateMachineSet},
		// UpdateMachine reaches the workload API server (up to three requests): the documented
		// maximum timeout is 30 s, the default 10 s; 20 s leaves room for a slow edge link.
		{Hook: runtimehooksv1.UpdateMachine, Name: UpdateMachineHandler, HandlerFunc: h.UpdateMachine, TimeoutSeconds: ptr.To[int32](20)},
	} {
		if err := rs.AddExtensionHandler(eh); err != nil {
			return fmt.Errorf("in-place update extension handler %s: %w", eh.Name, err)
		}
	}
	// Registers the discovery handler and every hook's route on ws, then returns.
	return rs.Start(ctx)
}

// registerOnly is the manager's webhook server with Start reduced to nothing: the manager runs it.
type registerOnly struct{ webhook.Server }

func (registerOnly) Start(context.Context) error { return nil }
