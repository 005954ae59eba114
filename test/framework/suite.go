package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	"github.com/kairos-capi/kairos-capi/common/provider/manager"
)

// SetupFunc registers a provider's controllers and webhooks with the suite's manager, sharing
// its ClusterCache (bootstrapsetup.Setup or controlplanesetup.Setup with their options).
type SetupFunc func(ctx context.Context, mgr ctrl.Manager, clusterCache clustercache.ClusterCache) error

// SuiteOptions describe the management cluster of an envtest suite: one API server with
// Cluster API's core CRDs and the given providers' CRDs and webhook configurations, and one
// manager, configured as the providers' main (common/provider/manager) configures it, running
// the providers' controllers and serving their webhooks.
type SuiteOptions struct {
	// Providers whose CRDs (<provider>/config/crd/bases) and webhook configurations
	// (<provider>/config/webhook) the API server gets: "bootstrap", "controlplane".
	Providers []string
	// ExtraCRDFiles are more CRD files to install, for example an infrastructure provider's.
	ExtraCRDFiles []string
	// EditCRDs, when set, changes the loaded CRDs before the API server starts (to install an
	// older version of one, for example).
	EditCRDs func([]*apiextensionsv1.CustomResourceDefinition) error
	// AddToScheme build the scheme of the manager and of the suite's clients.
	AddToScheme []func(*runtime.Scheme) error

	// Name is the manager's name in the ClusterCache's user agent.
	Name string
	// ClusterCache tunes the ClusterCache the Setup functions share (its watch filter and
	// concurrency).
	ClusterCache manager.ClusterCacheOptions
	// Controller are the manager's controller options (SkipNameValidation when another manager
	// of the same process runs the same controllers).
	Controller config.Controller
	// Setup register the providers' controllers and webhooks, in this order.
	Setup []SetupFunc
}

// Suite is a started management API server and the manager that serves its webhooks.
type Suite struct {
	*Environment
	Scheme       *runtime.Scheme
	Manager      ctrl.Manager
	ClusterCache clustercache.ClusterCache

	cancel context.CancelFunc
	done   chan error
}

// suiteWebhookTimeout is how long StartSuite waits for the manager's webhook server.
const suiteWebhookTimeout = 30 * time.Second

// StartSuite starts the API server, then the manager, and returns once the manager serves
// the webhooks. Stop stops both.
func StartSuite(o SuiteOptions) (*Suite, error) {
	scheme := runtime.NewScheme()
	for _, add := range o.AddToScheme {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	crdFiles, err := CAPICRDFiles()
	if err != nil {
		return nil, err
	}
	ours, err := ProjectCRDFiles(o.Providers...)
	if err != nil {
		return nil, err
	}
	crds, err := LoadCRDs(slices.Concat(crdFiles, ours, o.ExtraCRDFiles)...)
	if err != nil {
		return nil, err
	}
	if o.EditCRDs != nil {
		if err := o.EditCRDs(crds); err != nil {
			return nil, err
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range o.Providers {
		dirs = append(dirs, filepath.Join(root, p, "config", "webhook"))
	}
	env, err := Start(Options{CRDs: crds, WebhookDirs: dirs, Scheme: scheme})
	if err != nil {
		return nil, err
	}
	s := &Suite{Environment: env, Scheme: scheme, done: make(chan error, 1)}
	if err := s.startManager(o); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// startManager creates the manager, runs the Setup functions and starts it.
func (s *Suite) startManager(o SuiteOptions) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	wh := s.WebhookInstallOptions
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{
		Scheme:                 s.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  manager.CacheOptions("", 10*time.Minute),
		NewCache:               manager.NewCache,
		Controller:             o.Controller,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	cc, err := manager.NewClusterCache(ctx, mgr, o.Name, o.ClusterCache)
	if err != nil {
		return err
	}
	for _, setup := range o.Setup {
		if err := setup(ctx, mgr, cc); err != nil {
			return err
		}
	}
	s.Manager, s.ClusterCache = mgr, cc
	go func() {
		err := mgr.Start(ctx)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
		s.done <- err
	}()
	if err := s.WaitForWebhooks(suiteWebhookTimeout); err != nil {
		select {
		case merr := <-s.done:
			s.done <- merr // for Stop
			return fmt.Errorf("%w (the manager stopped: %v)", err, merr)
		default:
			return err
		}
	}
	return nil
}

// Stop stops the manager, waits until it has stopped, then stops the API server. It returns
// the manager's error, if any, and the API server's.
func (s *Suite) Stop() error {
	var errs []error
	if s.cancel != nil {
		s.cancel()
		if s.Manager != nil {
			if err := <-s.done; err != nil {
				errs = append(errs, fmt.Errorf("manager: %w", err))
			}
		}
	}
	if err := s.Environment.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("API server: %w", err))
	}
	return errors.Join(errs...)
}

// RunSuite is a TestMain: it starts the suite, stores it in *mgmt for the tests, runs them
// and stops the suite. Its result is the exit code (1 when the suite does not start).
//
//	func TestMain(m *testing.M) { os.Exit(framework.RunSuite(m, &mgmt, framework.SuiteOptions{...})) }
func RunSuite(m *testing.M, mgmt **Suite, o SuiteOptions) int {
	ctrl.SetLogger(Logger())
	s, err := StartSuite(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the suite:", err)
		}
	}()
	*mgmt = s
	return m.Run()
}
