// Package harness runs an in-process Cluster API management cluster for the lifecycle tests:
// one envtest API server with Cluster API's core CRDs and admission webhooks, our bootstrap
// provider's, the simulation infrastructure provider's (test/infrastructure) and any extra
// provider's, with kube-controller-manager's garbage collector and namespace controller (so
// owner references delete what a deleted object owned, as in a real management cluster); and
// one manager running Cluster API's ClusterCache and core reconcilers
// (Cluster, Machine, MachineSet, MachineDeployment, MachineHealthCheck and, behind Cluster API's
// MachinePool feature gate as in Cluster API's own manager, MachinePool), the bootstrap provider,
// the simulation infrastructure controllers and the extra providers' Setup functions. Machines
// (and every replica of a MachinePool on KairosSimMachinePool infrastructure) become simulated
// Kairos nodes (test/simnode) that start real workload API servers.
//
// Start one Harness per test binary (TestMain) with New, or per test with Start. Logs are
// silent unless KAIROS_TEST_LOG=1.
//
// Plugging in another provider (the control-plane provider, for example):
//
//	h, err := harness.New(harness.Options{
//		ExtraCRDFiles:    crdFiles,                  // loaded with the CAPI contract labels
//		ExtraWebhookDirs: []string{".../config/webhook"}, // controller-gen webhook manifests
//		AddToScheme:      []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
//		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
//			return controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{ClusterCache: cc})
//		}},
//	})
//
// Setup functions run again for every manager the harness starts (RestartManager), each time
// with a fresh manager and ClusterCache; controller name validation is disabled so that the
// same controllers can be registered again in the same process.
//
// With Options.InPlaceUpdates, Cluster API also runs with its RuntimeSDK and InPlaceUpdates
// feature gates, its ExtensionConfig reconciler and a runtime client
// (common/provider/runtimeclient), and the Kairos in-place update extension, which the
// control-plane provider's Setup serves on the harness' webhook server, is registered for the
// namespaces labelled InPlaceNamespaceLabel (see inplace.go).
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinepool"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	capisetup "sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/index"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	infracontrollers "github.com/kairos-capi/kairos-capi/test/infrastructure/controllers"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// controllerName names the in-process manager in user agents.
const controllerName = "kairos-capi-lifecycle-harness"

// SetupFunc registers a provider's controllers and webhooks with a manager, sharing the
// harness' ClusterCache. It is called for every manager the harness starts.
type SetupFunc func(ctx context.Context, mgr ctrl.Manager, clusterCache clustercache.ClusterCache) error

// Options configure a Harness.
type Options struct {
	// ExtraCRDFiles are CRD files of other providers, loaded with the Cluster API contract
	// labels like ours.
	ExtraCRDFiles []string
	// ExtraWebhookDirs are folders of controller-gen webhook manifests of other providers; the
	// manager serves them (their Setup functions register the handlers).
	ExtraWebhookDirs []string
	// AddToScheme adds other providers' API types to the scheme.
	AddToScheme []func(*runtime.Scheme) error
	// Setup registers other providers with each manager.
	Setup []SetupFunc

	// BootstrapTokenTTL is the bootstrap provider's join token lifetime. Default: the
	// provider's default.
	BootstrapTokenTTL time.Duration
	// MachineSetPreflightChecks of the MachineSet controller. Default: All, as Cluster API.
	MachineSetPreflightChecks []clusterv1.MachineSetPreflightCheck
	// RemoteConnectionGracePeriod (Cluster controller) and RemoteConditionsGracePeriod (Machine
	// controller). Defaults 50s and 2m; the latter must be at least 2m and longer than the
	// former.
	RemoteConnectionGracePeriod, RemoteConditionsGracePeriod time.Duration
	// ClusterCacheRetryInterval is how often the ClusterCache retries connecting to a workload
	// cluster. Default 2s (Cluster API: 30s).
	ClusterCacheRetryInterval time.Duration

	// Registry holds the simulated nodes; default: a new one that Stop closes.
	Registry *simnode.Registry

	// Env, when set, is a running management API server whose CRDs and webhook configurations
	// were installed by someone else (clusterctl init, in the sandbox): the harness then only
	// runs the manager against it, serving webhooks where Env's webhook options say, and Stop
	// leaves it running.
	Env *framework.Environment
	// NoBootstrapProvider leaves the Kairos bootstrap provider out of the manager: it runs
	// elsewhere (as a process of a given release, in the mixed-version test).
	NoBootstrapProvider bool

	// InPlaceUpdates runs Cluster API with its RuntimeSDK and InPlaceUpdates feature gates, a
	// runtime client (RuntimeClient, RuntimeClientFrom) in its Machine and MachineDeployment
	// reconcilers and its ExtensionConfig reconciler, and registers the Kairos in-place update
	// extension with an ExtensionConfig (ExtensionConfigName) pointing at the harness' webhook
	// server, for the namespaces labelled InPlaceNamespaceLabel=true only (OptIntoInPlaceUpdates).
	// The extension must be served there: a Setup must call controlplane/setup.Setup, or the
	// manager fails when Cluster API's discovery of it times out.
	//
	// The feature gates are process-global: once a harness asked for them, every harness of the
	// same test binary runs with them, with a runtime client that knows no extension when it
	// did not ask (so its rollouts stay classic).
	InPlaceUpdates bool
	// InPlaceExtensionElsewhere, with InPlaceUpdates, leaves the extension's registration to
	// the test: a control-plane manager process serves it and the ExtensionConfig the provider
	// ships registers it (the clusterctl tests). The harness then applies no ExtensionConfig of
	// its own; Cluster API's ExtensionConfig reconciler still discovers whatever is registered.
	InPlaceExtensionElsewhere bool
}

// Harness is a running management cluster with Cluster API, the bootstrap provider and the
// simulation infrastructure provider.
type Harness struct {
	// Env is the management API server.
	Env *framework.Environment
	// Client is a client of the management cluster (uncached).
	Client client.Client
	// Scheme knows every API of the harness.
	Scheme *runtime.Scheme
	// Registry holds the simulated nodes and workload clusters.
	Registry *simnode.Registry

	opts        Options
	ownRegistry bool
	// gc is the controller manager running the garbage collector and the namespace controller
	// of the API server this harness started.
	gc    *framework.Process
	gcDir string

	mu  sync.Mutex
	run *managerRun

	observer observer
}

type managerRun struct {
	cancel        context.CancelFunc
	done          chan error
	clusterCache  clustercache.ClusterCache
	mgr           ctrl.Manager
	runtimeClient runtimeclient.Client
}

var setLoggerOnce sync.Once

// New starts the management API server and a manager. Call Stop when done.
func New(o Options) (*Harness, error) {
	setLoggerOnce.Do(func() {
		l := framework.Logger()
		ctrl.SetLogger(l)
		klog.SetLogger(l)
	})
	if o.RemoteConnectionGracePeriod == 0 {
		o.RemoteConnectionGracePeriod = 50 * time.Second
	}
	if o.RemoteConditionsGracePeriod == 0 {
		o.RemoteConditionsGracePeriod = 2 * time.Minute
	}
	if o.RemoteConditionsGracePeriod < 2*time.Minute || o.RemoteConditionsGracePeriod <= o.RemoteConnectionGracePeriod {
		return nil, errors.New("harness: RemoteConditionsGracePeriod must be at least 2m and longer than RemoteConnectionGracePeriod")
	}
	if o.ClusterCacheRetryInterval == 0 {
		o.ClusterCacheRetryInterval = 2 * time.Second
	}
	if len(o.MachineSetPreflightChecks) == 0 {
		o.MachineSetPreflightChecks = []clusterv1.MachineSetPreflightCheck{clusterv1.MachineSetPreflightCheckAll}
	}

	if o.InPlaceUpdates {
		if err := EnableInPlaceGates(); err != nil {
			return nil, err
		}
	}
	h := &Harness{opts: o, Scheme: runtime.NewScheme()}
	for _, add := range append([]func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, clusterv1beta1.AddToScheme,
		bootstrapv1.AddToScheme, infrav1.AddToScheme, runtimev1.AddToScheme,
	}, o.AddToScheme...) {
		if err := add(h.Scheme); err != nil {
			return nil, err
		}
	}

	if o.Env != nil {
		c, err := client.New(o.Env.Config, client.Options{Scheme: h.Scheme})
		if err != nil {
			return nil, err
		}
		h.Env, h.Client = o.Env, c
	} else if err := h.startEnv(); err != nil {
		return nil, err
	}
	h.Registry, h.ownRegistry = o.Registry, o.Registry == nil
	if h.Registry == nil {
		reg, err := simnode.NewRegistry(simnode.Options{})
		if err != nil {
			_ = h.Stop()
			return nil, err
		}
		h.Registry = reg
	}
	if o.InPlaceUpdates && !o.InPlaceExtensionElsewhere {
		if err := h.applyExtensionConfig(context.Background()); err != nil {
			_ = h.Stop()
			return nil, err
		}
	}
	if err := h.StartManager(); err != nil {
		_ = h.Stop()
		return nil, err
	}
	return h, nil
}

// Start starts a Harness for one test and stops it when the test ends.
func Start(t testing.TB, o Options) *Harness {
	t.Helper()
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// GarbageCollectorState says whether the harness' kube-controller-manager still runs, and what
// it logged apart from namespace deletions, for failures that depend on it.
func (h *Harness) GarbageCollectorState() string {
	if h.gc == nil {
		return "not started"
	}
	var lines []string
	for _, l := range strings.Split(h.gc.Output(), "\n") {
		if !strings.Contains(l, "namespace_controller.go") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	state := "running"
	if exited, err := h.gc.Exited(); exited {
		state = fmt.Sprintf("exited (%v)", err)
	}
	return state + "; last log lines:\n" + strings.Join(lines, "\n")
}

// Stop stops the manager, every simulated node and workload cluster, and the management API
// server.
func (h *Harness) Stop() error {
	h.observer.stop()
	errs := []error{h.StopManager()}
	if h.ownRegistry && h.Registry != nil {
		h.Registry.Close()
	}
	if h.gc != nil {
		errs = append(errs, h.gc.Stop(10*time.Second))
		_ = os.RemoveAll(h.gcDir)
	}
	if h.Env != nil && h.opts.Env == nil {
		errs = append(errs, h.Env.Stop())
	}
	return errors.Join(errs...)
}

func (h *Harness) startEnv() error {
	assets, err := framework.Assets()
	if err != nil {
		return err
	}
	capiCRDs, err := framework.CAPICRDFiles()
	if err != nil {
		return err
	}
	ours, err := framework.ProjectCRDFiles("bootstrap")
	if err != nil {
		return err
	}
	infra, err := infrastructure.CRDFiles()
	if err != nil {
		return err
	}
	files := append(append(append(capiCRDs, ours...), infra...), h.opts.ExtraCRDFiles...)
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return err
	}
	mutating, validating, err := h.webhookConfigurations()
	if err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: mutating, ValidatingWebhooks: validating},
	}
	cfg, err := framework.StartTuned(env)
	if err != nil {
		return fmt.Errorf("starting the management API server: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: h.Scheme})
	if err != nil {
		_ = env.Stop()
		return err
	}
	h.Env = &framework.Environment{Environment: env, Config: cfg, Client: c}
	h.Client = c
	if h.gcDir, err = os.MkdirTemp("", "kairos-harness-kcm-"); err != nil {
		_ = env.Stop()
		return err
	}
	if h.gc, err = h.Env.StartControllerManager(h.gcDir); err != nil {
		_ = env.Stop()
		return fmt.Errorf("starting the garbage collector: %w", err)
	}
	return nil
}

// servedCAPIWebhooks are the Cluster API admission webhooks the harness serves (by the
// resource in their path); the others' configurations are not installed.
var servedCAPIWebhooks = sets.New("cluster", "clusterclass", "machine", "machineset", "machinedeployment", "machinehealthcheck", "machinedrainrule", "machinepool")

// ServesCAPIWebhook tells whether the harness serves the Cluster API webhook at path.
func ServesCAPIWebhook(path string) bool {
	i := strings.LastIndex(path, "-v1beta2-")
	return i >= 0 && servedCAPIWebhooks.Has(path[i+len("-v1beta2-"):])
}

// webhookConfigurations reads the webhook configurations of Cluster API, the bootstrap provider
// and the extra providers. Each gets a unique name: controller-gen names every provider's
// configurations alike, and envtest would let the last one win.
func (h *Harness) webhookConfigurations() ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	capiDir, err := framework.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, nil, err
	}
	sources := []struct {
		prefix string
		files  []string
		keep   func(path string) bool
	}{{
		prefix: "capi",
		files:  []string{filepath.Join(capiDir, "core", "config", "webhook", "manifests.yaml")},
		keep:   ServesCAPIWebhook,
	}}
	dirs := append([]string{filepath.Join(root, "bootstrap", "config", "webhook")}, h.opts.ExtraWebhookDirs...)
	for i, d := range dirs {
		files, err := filepath.Glob(filepath.Join(d, "*.yaml"))
		if err != nil {
			return nil, nil, err
		}
		if len(files) == 0 {
			return nil, nil, fmt.Errorf("no webhook manifests in %s", d)
		}
		sources = append(sources, struct {
			prefix string
			files  []string
			keep   func(path string) bool
		}{prefix: fmt.Sprintf("provider%d", i), files: files, keep: func(string) bool { return true }})
	}

	var mutating []*admissionv1.MutatingWebhookConfiguration
	var validating []*admissionv1.ValidatingWebhookConfiguration
	for _, src := range sources {
		for _, f := range src.files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, err
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			for {
				var raw runtime.RawExtension
				if err := dec.Decode(&raw); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					return nil, nil, fmt.Errorf("%s: %w", f, err)
				}
				var meta struct{ Kind string }
				if err := yaml.Unmarshal(raw.Raw, &meta); err != nil {
					return nil, nil, err
				}
				switch meta.Kind {
				case "MutatingWebhookConfiguration":
					w := &admissionv1.MutatingWebhookConfiguration{}
					if err := yaml.Unmarshal(raw.Raw, w); err != nil {
						return nil, nil, err
					}
					var hooks []admissionv1.MutatingWebhook
					for _, hk := range w.Webhooks {
						if hk.ClientConfig.Service != nil && hk.ClientConfig.Service.Path != nil && src.keep(*hk.ClientConfig.Service.Path) {
							hooks = append(hooks, hk)
						}
					}
					w.Name, w.Webhooks = src.prefix+"-"+w.Name, hooks
					mutating = append(mutating, w)
				case "ValidatingWebhookConfiguration":
					w := &admissionv1.ValidatingWebhookConfiguration{}
					if err := yaml.Unmarshal(raw.Raw, w); err != nil {
						return nil, nil, err
					}
					var hooks []admissionv1.ValidatingWebhook
					for _, hk := range w.Webhooks {
						if hk.ClientConfig.Service != nil && hk.ClientConfig.Service.Path != nil && src.keep(*hk.ClientConfig.Service.Path) {
							hooks = append(hooks, hk)
						}
					}
					w.Name, w.Webhooks = src.prefix+"-"+w.Name, hooks
					validating = append(validating, w)
				}
			}
		}
	}
	return mutating, validating, nil
}

// StartManager starts a fresh manager (new caches, ClusterCache and controllers) against the
// management API server, and waits until its webhooks answer.
func (h *Harness) StartManager() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != nil {
		return errors.New("harness: the manager is already running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	mgr, cc, rc, err := h.newManager(ctx)
	if err != nil {
		cancel()
		return err
	}
	run := &managerRun{cancel: cancel, done: make(chan error, 1), clusterCache: cc, mgr: mgr, runtimeClient: rc}
	go func() { run.done <- mgr.Start(ctx) }()
	if err := h.Env.WaitForWebhooks(30 * time.Second); err != nil {
		cancel()
		<-run.done
		return err
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		<-run.done
		return errors.New("harness: the manager's caches did not sync")
	}
	if rc != nil && h.opts.InPlaceUpdates {
		if err := waitRuntimeClientReady(rc, run.done, 75*time.Second); err != nil {
			cancel()
			select {
			case <-run.done:
			case <-time.After(2 * time.Minute):
			}
			return err
		}
	}
	h.run = run
	return nil
}

// StopManager stops the manager and waits for it to finish, as if the provider processes
// were killed; the API server, the simulated nodes and workload clusters keep running.
func (h *Harness) StopManager() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	h.run.cancel()
	var err error
	select {
	case err = <-h.run.done:
	case <-time.After(2 * time.Minute):
		err = errors.New("harness: the manager did not stop within 2m")
	}
	h.run = nil
	return err
}

// RestartManager stops the manager and starts a fresh one.
func (h *Harness) RestartManager() error {
	if err := h.StopManager(); err != nil {
		return err
	}
	return h.StartManager()
}

// ClusterCache returns the running manager's ClusterCache, or nil.
func (h *Harness) ClusterCache() clustercache.ClusterCache {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	return h.run.clusterCache
}

// Manager returns the running manager, or nil.
func (h *Harness) Manager() ctrl.Manager {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil {
		return nil
	}
	return h.run.mgr
}

// managerCacheOptions are Cluster API's manager cache options, except that the Secrets with
// the cluster-name label keep their data: Cluster API's core controllers read Secrets uncached
// (and drop the data of cached ones but kubeconfigs), while the Kairos providers' own managers
// cache those Secrets whole and read cluster certificates from the cache
// (common/provider/manager.CacheOptions). ProviderClient reads through this cache.
func managerCacheOptions(scheme *runtime.Scheme, informerName string) ctrlcache.Options {
	opts := capisetup.ManagerCacheOptions(scheme, informerName, "", 10*time.Minute)
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			by.Transform = ctrlcache.TransformStripManagedFields()
			opts.ByObject[obj] = by
		}
	}
	return opts
}

// ProviderClient is the client a Kairos provider gets in its own manager: reads come from the
// manager's cache, Secrets with the cluster-name label included. The harness' manager client
// has Cluster API's options (Secrets uncached) for Cluster API's controllers; the providers get
// this one, so that they run here as they run in production. Before, every reconcile of a
// control plane read its four certificate Secrets from the API server: a third of all the
// requests the management API server served in the lifecycle tests.
func ProviderClient(mgr ctrl.Manager) (client.Client, error) {
	c, err := client.New(mgr.GetConfig(), client.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		// Unstructured: infrastructure machines and templates from the cache too, as the
		// providers' managers read them (common/provider/manager); without it every such read
		// went to the API server.
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the providers' client: %w", err)
	}
	return c, nil
}

// managerGeneration numbers the managers of the process: Cluster API registers a process-wide
// informer name per manager cache and never releases it.
var managerGeneration atomic.Int64

func (h *Harness) newManager(ctx context.Context) (_ ctrl.Manager, _ clustercache.ClusterCache, _ runtimeclient.Client, reterr error) {
	// A panicking Setup would kill the test process before TestMain stops the API servers.
	defer func() {
		if r := recover(); r != nil {
			reterr = fmt.Errorf("harness: setting up the manager panicked: %v", r)
		}
	}()
	wh := h.Env.WebhookInstallOptions
	informerName := fmt.Sprintf("%s-%d", controllerName, managerGeneration.Add(1))
	mgr, err := ctrl.NewManager(h.Env.Config, ctrl.Options{
		Scheme:                 h.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  managerCacheOptions(h.Scheme, informerName),
		Client:                 capisetup.ManagerClientOptions(),
		// A restarted manager registers the same controllers again in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return nil, nil, nil, err
	}
	secretCachingClient, err := capisetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, nil, nil, err
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        capisetup.ClusterCacheCacheOptions(),
		Client:       capisetup.ClusterCacheClientOptions(controllerName, 20, 30),
	}, controller.Options{MaxConcurrentReconciles: 10})
	if err != nil {
		return nil, nil, nil, err
	}
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(h.opts.ClusterCacheRetryInterval)
	}

	// nil unless the InPlaceUpdates feature gate is on (Options.InPlaceUpdates, or another
	// harness of the process asked for it).
	rc, err := h.setupRuntimeSDK(ctx, mgr)
	if err != nil {
		return nil, nil, nil, err
	}
	if rc != nil {
		ctx = context.WithValue(ctx, runtimeClientKey{}, rc)
	}
	concurrency := func(n int) controller.Options { return controller.Options{MaxConcurrentReconciles: n} }
	if err := (&cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConnectionGracePeriod: h.opts.RemoteConnectionGracePeriod,
	}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
		return nil, nil, nil, fmt.Errorf("Cluster controller: %w", err)
	}
	if err := (&machine.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RuntimeClient: rc,
		RemoteConditionsGracePeriod: h.opts.RemoteConditionsGracePeriod,
	}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
		return nil, nil, nil, fmt.Errorf("Machine controller: %w", err)
	}
	if err := (&machineset.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		PreflightChecks: sets.New(h.opts.MachineSetPreflightChecks...),
	}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
		return nil, nil, nil, fmt.Errorf("MachineSet controller: %w", err)
	}
	if err := (&machinedeployment.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), RuntimeClient: rc,
	}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
		return nil, nil, nil, fmt.Errorf("MachineDeployment controller: %w", err)
	}
	if err := (&machinehealthcheck.Reconciler{
		Client: mgr.GetClient(), ClusterCache: cc,
	}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
		return nil, nil, nil, fmt.Errorf("MachineHealthCheck controller: %w", err)
	}
	// Cluster API's manager wires the MachinePool controller behind its feature gate (on by
	// default); its webhook refuses MachinePools while the gate is off.
	if feature.Gates.Enabled(feature.MachinePool) {
		if err := (&machinepool.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		}).SetupWithManager(ctx, mgr, concurrency(10)); err != nil {
			return nil, nil, nil, fmt.Errorf("MachinePool controller: %w", err)
		}
	}
	for name, setup := range map[string]interface{ SetupWebhookWithManager(ctrl.Manager) error }{
		"Cluster":            &coreadmission.Cluster{Client: mgr.GetClient(), ClusterCacheReader: cc},
		"ClusterClass":       &coreadmission.ClusterClass{Client: mgr.GetClient()},
		"Machine":            &coreadmission.Machine{},
		"MachineSet":         &coreadmission.MachineSet{},
		"MachineDeployment":  &coreadmission.MachineDeployment{},
		"MachineHealthCheck": &coreadmission.MachineHealthCheck{},
		"MachineDrainRule":   &coreadmission.MachineDrainRule{},
		"MachinePool":        &coreadmission.MachinePool{},
	} {
		if err := setup.SetupWebhookWithManager(mgr); err != nil {
			return nil, nil, nil, fmt.Errorf("%s webhook: %w", name, err)
		}
	}

	if !h.opts.NoBootstrapProvider {
		c, err := ProviderClient(mgr)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := bootstrapsetup.Setup(ctx, mgr, bootstrapsetup.Options{
			Client:                  c,
			ClusterCache:            cc,
			TokenTTL:                h.opts.BootstrapTokenTTL,
			KairosConfigConcurrency: 4,
		}); err != nil {
			return nil, nil, nil, fmt.Errorf("bootstrap provider: %w", err)
		}
	}
	if err := infracontrollers.Setup(ctx, mgr, infracontrollers.Options{Registry: h.Registry}); err != nil {
		return nil, nil, nil, fmt.Errorf("simulation infrastructure provider: %w", err)
	}
	for i, setup := range h.opts.Setup {
		if err := setup(ctx, mgr, cc); err != nil {
			return nil, nil, nil, fmt.Errorf("extra provider %d: %w", i, err)
		}
	}
	return mgr, cc, rc, nil
}
