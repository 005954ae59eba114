package setup

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"sigs.k8s.io/cluster-api/core/reconcilers/extensionconfig"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"

	kairosruntimeclient "github.com/kairos-capi/kairos-capi/common/provider/runtimeclient"
)

// What the read-only ExtensionConfig reconciler and the runtime client read: ExtensionConfigs
// (warm-up list, watch) and the metadata of Namespaces (the namespaceSelectors, through the
// cache). Nothing is written: Cluster API core discovers the extensions and injects their CA.
// +kubebuilder:rbac:groups=runtime.cluster.x-k8s.io,resources=extensionconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// NewRuntimeClient returns the runtime client the control plane asks CanUpdateMachine through
// (Options.RuntimeClient), or nil when Cluster API's InPlaceUpdates feature gate is off, as
// KubeadmControlPlane's manager does (cluster-api v1.14.2 controlplane/kubeadm/main.go).
//
// With the gate on it also runs Cluster API's ExtensionConfig reconciler on mgr, read-only: it
// warms the client up with the ExtensionConfigs that exist when the manager starts (once the
// manager leads) and then registers and unregisters them as Cluster API core discovers, changes
// and deletes them, reading the handlers from their status. Cluster API core owns discovery and
// CA injection, so this manager never writes an ExtensionConfig (two writers would fight over
// its status). As in KubeadmControlPlane, an ExtensionConfig that core has not discovered (no
// caBundle, Discovered condition not True for its generation) keeps the warm-up retrying, and
// after 60 s stops the manager: a control plane that cannot tell which extensions exist must
// not decide on in-place updates. watchFilter is the manager's --watch-filter: as for Cluster
// API's managers, only ExtensionConfigs carrying that label are followed after the warm-up,
// which reads them all.
//
// It is separate from Setup because the test harness runs Cluster API core in-process, whose
// ExtensionConfig reconciler (write mode) already feeds the client it passes as
// Options.RuntimeClient; a second reconciler in the same manager would register the same
// controller and cache index twice.
func NewRuntimeClient(ctx context.Context, mgr ctrl.Manager, watchFilter string) (runtimeclient.Client, error) {
	if !feature.Gates.Enabled(feature.InPlaceUpdates) {
		// An untyped nil: a nil *Client in the interface would look set to the reconciler.
		return nil, nil
	}
	// The manager's client reads Namespaces from the cache, as Cluster API's own runtime client.
	rc, err := kairosruntimeclient.New(kairosruntimeclient.Options{Namespaces: mgr.GetClient()})
	if err != nil {
		return nil, fmt.Errorf("creating the runtime SDK client: %w", err)
	}
	if err := (&extensionconfig.Reconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		RuntimeClient: rc,
		// PartialSecretCache stays nil: it feeds only the Secret watch of the CA injection that
		// write mode does, and the reconciler refuses one in read-only mode.
		ReadOnly:         true,
		WatchFilterValue: watchFilter,
		// One worker: a read-only reconcile validates the object and updates the client's
		// in-memory registrations, and a management cluster has a handful of ExtensionConfigs.
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 1}); err != nil {
		return nil, fmt.Errorf("setting up the read-only ExtensionConfig controller: %w", err)
	}
	return rc, nil
}
