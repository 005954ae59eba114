package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/core/reconcilers/extensionconfig"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"

	kairosruntimeclient "github.com/kairos-capi/kairos-capi/common/provider/runtimeclient"
)

// In-place updates (Options.InPlaceUpdates, issue 20): Cluster API runs with its RuntimeSDK and
// InPlaceUpdates feature gates, and the Kairos in-place update extension is registered with it
// through an ExtensionConfig, discovered by Cluster API's ExtensionConfig reconciler as in
// production.
const (
	// InPlaceNamespaceLabel, set to "true" on a namespace, opts its objects into in-place
	// updates: the harness' ExtensionConfig selects only such namespaces, so that every other
	// scenario keeps classic rollouts even when the feature gates are on in the process.
	InPlaceNamespaceLabel = "test.kairos-capi.io/in-place-updates"
	// ExtensionConfigName names the harness' ExtensionConfig; handlers are registered as
	// <handler>.<ExtensionConfigName>.
	ExtensionConfigName = "kairos-controlplane-inplace-update"
)

// EnableInPlaceGates turns Cluster API's RuntimeSDK and InPlaceUpdates feature gates on; a
// harness with Options.InPlaceUpdates does it when it starts.
//
// The gates are process-global (feature.MutableGates) and never turned off again: every later
// harness of the same test binary runs with them too. Those that did not ask for in-place
// updates still behave as before: they get a runtime client that knows no extension (Cluster
// API's Machine and MachineDeployment reconcilers refuse to start without one while the gate is
// on), so every MachineDeployment rolls out as without the gate. A harness started before the
// gates were turned on has no runtime client at all, and Cluster API's reconcilers read the gate
// at every reconciliation: a test binary whose harnesses run side by side and only some of
// which ask for in-place updates calls this before any starts (its TestMain).
func EnableInPlaceGates() error {
	if err := feature.MutableGates.SetFromMap(map[string]bool{
		string(feature.RuntimeSDK): true, string(feature.InPlaceUpdates): true,
	}); err != nil {
		return fmt.Errorf("harness: enabling the RuntimeSDK and InPlaceUpdates feature gates: %w", err)
	}
	return nil
}

type runtimeClientKey struct{}

// RuntimeClientFrom returns the runtime client of the manager a SetupFunc is called for (from
// the context it is given), or nil when the InPlaceUpdates feature gate is off. It is how a
// provider's Setup gets the client Cluster API's reconcilers use:
//
//	controlplanesetup.Options{ClusterCache: cc, RuntimeClient: harness.RuntimeClientFrom(ctx)}
func RuntimeClientFrom(ctx context.Context) runtimeclient.Client {
	rc, _ := ctx.Value(runtimeClientKey{}).(runtimeclient.Client)
	return rc
}

// RuntimeClient returns the running manager's runtime client, or nil (no manager, or the
// InPlaceUpdates feature gate is off). Each manager has its own: a restarted manager warms up a
// new one, as a restarted process would.
func (h *Harness) RuntimeClient() runtimeclient.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil || h.run.runtimeClient == nil {
		return nil
	}
	return h.run.runtimeClient
}

// setupRuntimeSDK returns the runtime client for a new manager's Cluster API reconcilers, or nil
// when the InPlaceUpdates gate is off. With Options.InPlaceUpdates it also runs Cluster API's
// ExtensionConfig reconciler, which warms the client up with the ExtensionConfigs, discovers them
// and keeps the client's registrations current; without, the client is warmed up empty.
func (h *Harness) setupRuntimeSDK(ctx context.Context, mgr ctrl.Manager) (runtimeclient.Client, error) {
	if !feature.Gates.Enabled(feature.InPlaceUpdates) {
		return nil, nil
	}
	// The manager's client reads Namespaces from the cache, as Cluster API's own runtime client.
	rc, err := kairosruntimeclient.New(kairosruntimeclient.Options{Namespaces: mgr.GetClient()})
	if err != nil {
		return nil, err
	}
	if !h.opts.InPlaceUpdates {
		if err := rc.WarmUp(&runtimev1.ExtensionConfigList{}); err != nil {
			return nil, err
		}
		return rc, nil
	}
	// The metadata-only Secret cache Cluster API's manager gives the reconciler, for the CA
	// injection annotation (runtime.cluster.x-k8s.io/inject-ca-from-secret) the harness'
	// ExtensionConfig does not use: the reconciler requires it.
	secrets, err := ctrlcache.New(mgr.GetConfig(), ctrlcache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultTransform: ctrlcache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("the ExtensionConfig reconciler's Secret cache: %w", err)
	}
	if err := mgr.Add(secrets); err != nil {
		return nil, err
	}
	if err := (&extensionconfig.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), RuntimeClient: rc, PartialSecretCache: secrets,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 1}); err != nil {
		return nil, fmt.Errorf("ExtensionConfig controller: %w", err)
	}
	return rc, nil
}

// applyExtensionConfig creates (or updates) the ExtensionConfig registering the Kairos in-place
// update extension with Cluster API. The extension is served by the harness' own webhook server
// (controlplane/setup.Setup registers it there), so the ExtensionConfig points at it by url, with
// envtest's serving CA, instead of the Service of controlplane/config/extension.
func (h *Harness) applyExtensionConfig(ctx context.Context) error {
	wh := h.Env.WebhookInstallOptions
	host := wh.LocalServingHost
	if host == "" {
		host = "127.0.0.1"
	}
	spec := runtimev1.ExtensionConfigSpec{
		ClientConfig: runtimev1.ClientConfig{
			URL:      "https://" + net.JoinHostPort(host, strconv.Itoa(wh.LocalServingPort)),
			CABundle: wh.LocalServingCAData,
		},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{InPlaceNamespaceLabel: "true"}},
	}
	ec := &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: ExtensionConfigName}}
	err := h.Client.Get(ctx, client.ObjectKeyFromObject(ec), ec)
	switch {
	case apierrors.IsNotFound(err):
		ec.Spec = spec
		err = h.Client.Create(ctx, ec)
	case err == nil:
		// Another harness run against the same API server (the sandbox's) may have served
		// webhooks on another port.
		ec.Spec = spec
		err = h.Client.Update(ctx, ec)
	}
	if err != nil {
		return fmt.Errorf("harness: applying ExtensionConfig %s: %w", ExtensionConfigName, err)
	}
	return nil
}

// OptIntoInPlaceUpdates labels a namespace so that the harness' ExtensionConfig selects it.
func (h *Harness) OptIntoInPlaceUpdates(ctx context.Context, namespace string) error {
	ns := &corev1.Namespace{}
	if err := h.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return fmt.Errorf("harness: reading namespace %s: %w", namespace, err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[InPlaceNamespaceLabel] = "true"
	if err := h.Client.Patch(ctx, ns, patch); err != nil {
		return fmt.Errorf("harness: labelling namespace %s for in-place updates: %w", namespace, err)
	}
	return nil
}

// waitRuntimeClientReady waits until Cluster API's ExtensionConfig reconciler has warmed up the
// runtime client (discovered the extension), so that a test's first in-place decision sees the
// extension. The warm-up retries for 60 s before failing the manager; done reports that.
func waitRuntimeClientReady(rc runtimeclient.Client, done <-chan error, timeout time.Duration) error {
	deadline := time.After(timeout)
	for !rc.IsReady() {
		select {
		case err := <-done:
			return fmt.Errorf("harness: the manager stopped before the runtime extensions were discovered: %w", err)
		case <-deadline:
			return errors.New("harness: the runtime client was not warmed up in time (is the in-place update extension served? controlplane/setup.Setup registers it)")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
