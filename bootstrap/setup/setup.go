// Package setup registers the bootstrap provider's controller and webhooks with a manager. The
// manager binary uses it, and so do tests and the sandbox that run the provider in-process.
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
	"sigs.k8s.io/cluster-api/controllers/clustercache"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/reconcilers/kairosconfig"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/webhooks"
)

// ControllerName identifies the manager in user agents.
const ControllerName = "kairos-bootstrap-manager"

// DefaultTokenTTL is the default lifetime of generated join tokens.
const DefaultTokenTTL = kairosconfig.DefaultTokenTTL

var schemeBuilder = runtime.NewSchemeBuilder(clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme)

// AddToScheme adds every API the provider reads to a scheme.
var AddToScheme = schemeBuilder.AddToScheme

// Options configure the controller and webhooks Setup registers.
type Options struct {
	// ClusterCache reaches workload clusters. Processes that run several providers share one.
	ClusterCache            clustercache.ClusterCache
	WatchFilter             string
	TokenTTL                time.Duration
	KairosConfigConcurrency int
	// Client is what the controller reads and writes the management cluster with. Default: the
	// manager's client.
	Client client.Client
}

// Setup registers the provider's controller and webhooks with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	c := o.Client
	if c == nil {
		c = mgr.GetClient()
	}
	if err := (&kairosconfig.Reconciler{
		Client:           c,
		APIReader:        mgr.GetAPIReader(),
		ClusterCache:     o.ClusterCache,
		WatchFilterValue: o.WatchFilter,
		TokenTTL:         o.TokenTTL,
		Recorder:         mgr.GetEventRecorderFor("kairosconfig-controller"),
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: max(o.KairosConfigConcurrency, 1)}); err != nil {
		return err
	}
	if err := (&webhooks.KairosConfig{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosConfig webhook: %w", err)
	}
	if err := (&webhooks.KairosConfigTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosConfigTemplate webhook: %w", err)
	}
	return nil
}
