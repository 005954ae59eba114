// Package setup registers the control-plane provider's controller, webhooks and in-place update
// extension with a manager. The manager binary uses it, and so do tests and the sandbox that run
// the provider in-process.
package setup

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/extension"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/reconcilers/kairoscontrolplane"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/webhooks"
)

// ControllerName identifies the manager in user agents.
const ControllerName = "kairos-controlplane-manager"

// runtimev1: the ExtensionConfigs NewRuntimeClient's reconciler reads (with the InPlaceUpdates
// gate on; registering the kinds costs nothing without it).
var schemeBuilder = runtime.NewSchemeBuilder(clientgoscheme.AddToScheme, clusterv1.AddToScheme, runtimev1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme)

// AddToScheme adds every API the provider reads to a scheme.
var AddToScheme = schemeBuilder.AddToScheme

// Options configure the controller and webhooks Setup registers.
type Options struct {
	// ClusterCache reaches workload clusters. Required: processes running several providers
	// share one.
	ClusterCache                  clustercache.ClusterCache
	WatchFilter                   string
	KairosControlPlaneConcurrency int
	// EtcdHealthInterval is how often a control plane's etcd members are checked when nothing
	// else happens. Default: one minute.
	EtcdHealthInterval time.Duration
	// Client is what the controller reads and writes the management cluster with. Default:
	// the manager's client (the lifecycle tests count the controller's writes through it).
	Client client.Client
	// Version is the control plane's release (vX.Y.Z; the manager binary's, stamped at
	// release), which the version-skew policy compares with the installed bootstrap provider's.
	// Empty for builds from a source tree: then only the Cluster API contract is checked.
	Version string
	// RuntimeClient calls Cluster API runtime extensions: with the InPlaceUpdates feature gate
	// on, the control plane asks CanUpdateMachine whether an outdated Machine can be updated in
	// place instead of replaced. nil: Machines are always replaced. The manager binary gets it
	// from NewRuntimeClient; the test harness passes the client its Cluster API core feeds.
	RuntimeClient runtimeclient.Client
}

// Setup registers the provider's controller and webhooks with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	logInPlaceUpdates(ctx, o.RuntimeClient)
	c := o.Client
	if c == nil {
		c = mgr.GetClient()
	}
	if err := (&kairoscontrolplane.Reconciler{
		Client:           c,
		APIReader:        mgr.GetAPIReader(),
		ClusterCache:     o.ClusterCache,
		WatchFilterValue: o.WatchFilter,
		HealthInterval:   o.EtcdHealthInterval,
		Version:          o.Version,
		Recorder:         mgr.GetEventRecorderFor("kairoscontrolplane-controller"),
		RuntimeClient:    o.RuntimeClient,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.KairosControlPlaneConcurrency}); err != nil {
		return err
	}
	if err := (&webhooks.KairosControlPlane{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosControlPlane webhook: %w", err)
	}
	if err := (&webhooks.ScaleValidator{Client: mgr.GetAPIReader()}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosControlPlane scale webhook: %w", err)
	}
	if err := (&webhooks.KairosControlPlaneTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosControlPlaneTemplate webhook: %w", err)
	}
	// The Kairos in-place update extension (Cluster API runtime hooks CanUpdateMachine,
	// CanUpdateMachineSet, UpdateMachine) on the same webhook server. Serving it is inert: Cluster
	// API calls it only once an ExtensionConfig registers it and the InPlaceUpdates and RuntimeSDK
	// feature gates are on (controlplane/config/extension).
	if err := extension.Register(ctx, mgr.GetWebhookServer(), &extension.Handlers{Client: mgr.GetClient(), Remote: o.ClusterCache}); err != nil {
		return fmt.Errorf("setting up the in-place update extension: %w", err)
	}
	return nil
}

// logInPlaceUpdates says at start-up whether the control plane may update Machines in place, and
// what else that needs, so that an operator who turned the gate on is not left wondering why
// Machines are still replaced.
func logInPlaceUpdates(ctx context.Context, rc runtimeclient.Client) {
	log := ctrl.LoggerFrom(ctx).WithName("setup")
	switch {
	case !feature.Gates.Enabled(feature.InPlaceUpdates):
		log.Info("In-place updates are disabled (the InPlaceUpdates feature gate is off): outdated control-plane Machines are replaced")
	case rc == nil:
		// KubeadmControlPlane refuses to start then. Only a caller of Setup that passes no
		// client gets here (the manager binary always has one with the gate on), so the control
		// plane keeps working as without the gate instead.
		log.Info("The InPlaceUpdates feature gate is on but the manager has no runtime client: in-place updates are disabled, control-plane Machines are replaced")
	default:
		log.Info("In-place updates are enabled (InPlaceUpdates feature gate on, runtime client set). " +
			"Cluster API core must run with the RuntimeSDK and InPlaceUpdates feature gates, and the Kairos extension must be registered " +
			"with the ExtensionConfig of controlplane/config/extension (kubectl apply -k controlplane/config/extension); " +
			"until Cluster API has discovered it, outdated control-plane Machines are replaced")
	}
}
