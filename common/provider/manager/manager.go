// Package manager runs a provider's controller manager with the flags Cluster API's own managers
// have (--namespace, --watch-filter, --leader-elect, --diagnostics-address, --health-addr,
// webhook port and certificates, sync period, API rate limits, feature gates). Both Kairos
// providers' main packages use it, so they behave the same way.
package manager

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/flags"
)

// Options are the flags every provider manager has.
type Options struct {
	LeaderElect              bool
	LeaderElectLeaseDuration time.Duration
	LeaderElectRenewDeadline time.Duration
	LeaderElectRetryPeriod   time.Duration
	LeaderElectNamespace     string
	WatchNamespace           string
	WatchFilter              string
	ProfilerAddress          string
	SyncPeriod               time.Duration
	KubeAPIQPS               float32
	KubeAPIBurst             int
	ClusterCacheConcurrency  int
	ClusterCacheClientQPS    float32
	ClusterCacheClientBurst  int
	WebhookPort              int
	WebhookCertDir           string
	WebhookCertName          string
	WebhookKeyName           string
	HealthAddr               string
	Diagnostics              flags.ManagerOptions
	logging                  *logsv1.LoggingConfiguration
}

// AddFlags registers the common flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.logging = logs.NewOptions()
	logsv1.AddFlags(o.logging, fs)
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Enable leader election, so that only one manager is active.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long non-leaders wait before forcing leadership.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries refreshing leadership before giving up.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", 2*time.Second, "How long clients wait between leader election attempts.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", "", "Namespace of the leader election lease. Empty means the manager's own namespace (required when it runs outside a cluster).")
	fs.StringVar(&o.WatchNamespace, "namespace", "", "Namespace to reconcile objects in. Empty means all namespaces.")
	fs.StringVar(&o.WatchFilter, "watch-filter", "", fmt.Sprintf("Only reconcile objects whose %s label has this value. Empty means all objects.", clusterv1.WatchLabel))
	fs.StringVar(&o.ProfilerAddress, "profiler-address", "", "Bind address of the pprof profiler (e.g. localhost:6060). Empty disables it.")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 10*time.Minute, "Minimum interval at which watched objects are reconciled.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 100, "Queries per second to the management API server (Cluster API's managers default to 100).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 200, "Burst of queries to the management API server (Cluster API's managers default to 200).")
	fs.IntVar(&o.ClusterCacheConcurrency, "clustercache-concurrency", 100, "Number of clusters the cluster cache processes at once.")
	// Twice Cluster API's defaults (20 and 30): what the Kairos providers send a workload API
	// server is about one write per joining node (its join token, its provider ID), so a
	// scale-out of 200 nodes is not held to 10 s by the client; the server sees at most 40
	// small writes a second from this manager.
	fs.Float32Var(&o.ClusterCacheClientQPS, "clustercache-client-qps", 40, "Queries per second to each workload API server (Cluster API's managers default to 20).")
	fs.IntVar(&o.ClusterCacheClientBurst, "clustercache-client-burst", 80, "Burst of queries to each workload API server (Cluster API's managers default to 30).")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook serving certificate.")
	fs.StringVar(&o.WebhookCertName, "webhook-cert-name", "tls.crt", "File name of the webhook serving certificate.")
	fs.StringVar(&o.WebhookKeyName, "webhook-key-name", "tls.key", "File name of the webhook serving key.")
	fs.StringVar(&o.HealthAddr, "health-addr", ":9440", "Bind address of the health and readiness probes.")
	flags.AddManagerOptions(fs, &o.Diagnostics)
	feature.MutableGates.AddFlag(fs)
}

// Provider describes what one provider's manager runs.
type Provider struct {
	// Name identifies the manager, e.g. in user agents.
	Name string
	// Version and Commit are stamped into the binary at release time and logged at start.
	Version, Commit string
	// LeaderElectionID names the leader election lease.
	LeaderElectionID string
	// AddToScheme adds the APIs the provider reads.
	AddToScheme func(*runtime.Scheme) error
	// Cache returns the manager's cache options for a watched namespace.
	Cache func(namespace string, syncPeriod time.Duration) ctrlcache.Options
	// AddFlags registers the provider's own flags.
	AddFlags func(*pflag.FlagSet)
	// Setup registers the provider's controllers and webhooks.
	Setup func(context.Context, ctrl.Manager, *Options) error
}

// Main parses the command line and runs the manager until a signal stops it.
func Main(p Provider) {
	o := &Options{}
	o.AddFlags(pflag.CommandLine)
	if p.AddFlags != nil {
		p.AddFlags(pflag.CommandLine)
	}
	pflag.CommandLine.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()
	if err := run(ctrl.SetupSignalHandler(), p, o); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Manager failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, p Provider, o *Options) error {
	if err := logsv1.ValidateAndApply(o.logging, nil); err != nil {
		return fmt.Errorf("invalid logging flags: %w", err)
	}
	ctrl.SetLogger(klog.Background())

	scheme := runtime.NewScheme()
	if err := p.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restConfig.QPS, restConfig.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	restConfig.UserAgent = remote.DefaultClusterAPIUserAgent(p.Name)

	tlsOptions, metricsOptions, err := flags.GetManagerOptions(o.Diagnostics)
	if err != nil {
		return fmt.Errorf("invalid diagnostics flags: %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                     scheme,
		LeaderElection:             o.LeaderElect,
		LeaderElectionID:           p.LeaderElectionID,
		LeaderElectionNamespace:    o.LeaderElectNamespace,
		LeaseDuration:              &o.LeaderElectLeaseDuration,
		RenewDeadline:              &o.LeaderElectRenewDeadline,
		RetryPeriod:                &o.LeaderElectRetryPeriod,
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		HealthProbeBindAddress:     o.HealthAddr,
		PprofBindAddress:           o.ProfilerAddress,
		Metrics:                    *metricsOptions,
		Cache:                      p.Cache(o.WatchNamespace, o.SyncPeriod),
		NewCache:                   NewCache,
		// Infrastructure machines and templates are read as Unstructured: from the cache, as
		// Cluster API's managers read them (core/setup.ManagerClientOptions) and as the test
		// harness runs these providers. controller-runtime's default sends every such read to
		// the API server, several per control-plane reconcile.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		WebhookServer: webhook.NewServer(webhook.Options{
			Port: o.WebhookPort, CertDir: o.WebhookCertDir, CertName: o.WebhookCertName, KeyName: o.WebhookKeyName, TLSOpts: tlsOptions,
		}),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if err := p.Setup(ctx, mgr, o); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting manager", "provider", p.Name, "version", p.Version, "commit", p.Commit)
	return mgr.Start(ctx)
}

// CacheOptions caches only the Secrets that carry the cluster-name label (bootstrap data,
// cluster certificates, kubeconfigs, k3s tokens), not every Secret of the management cluster.
func CacheOptions(namespace string, syncPeriod time.Duration) ctrlcache.Options {
	var namespaces map[string]ctrlcache.Config
	if namespace != "" {
		namespaces = map[string]ctrlcache.Config{namespace: {}}
	}
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	return ctrlcache.Options{
		DefaultNamespaces: namespaces,
		SyncPeriod:        &syncPeriod,
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)},
		},
	}
}

// ClusterCacheOptions tune the ClusterCache.
type ClusterCacheOptions struct {
	WatchFilter string
	Concurrency int
	QPS         float32
	Burst       int
}

// ClusterCacheOptions returns the ClusterCache options of the command line.
func (o *Options) ClusterCacheOptions() ClusterCacheOptions {
	return ClusterCacheOptions{WatchFilter: o.WatchFilter, Concurrency: o.ClusterCacheConcurrency, QPS: o.ClusterCacheClientQPS, Burst: o.ClusterCacheClientBurst}
}

// NewClusterCache creates the ClusterCache through which providers reach workload clusters.
// Workload Secrets and ConfigMaps are never cached: join tokens are read uncached, and caching
// them would mean watching every Secret of every workload cluster.
func NewClusterCache(ctx context.Context, mgr ctrl.Manager, name string, o ClusterCacheOptions) (clustercache.ClusterCache, error) {
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:     mgr.GetClient(),
		WatchFilterValue: o.WatchFilter,
		Cache:            clustercache.CacheOptions{DefaultTransform: ctrlcache.TransformStripManagedFields()},
		Client: clustercache.ClientOptions{
			QPS:       o.QPS,
			Burst:     o.Burst,
			UserAgent: remote.DefaultClusterAPIUserAgent(name),
			Cache: clustercache.ClientCacheOptions{
				DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}},
			},
		},
	}, controller.Options{MaxConcurrentReconciles: max(o.Concurrency, 1)})
	if err != nil {
		return nil, fmt.Errorf("creating the cluster cache: %w", err)
	}
	return cc, nil
}
