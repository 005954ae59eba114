// The Kairos bootstrap provider manager: reconciles KairosConfigs and serves their webhooks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/flags"

	"github.com/kairos-capi/kairos-capi/bootstrap/setup"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	if err := setup.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// options are the manager's flags, named as in Cluster API's own managers.
type options struct {
	leaderElect              bool
	leaderElectLeaseDuration time.Duration
	leaderElectRenewDeadline time.Duration
	leaderElectRetryPeriod   time.Duration
	watchNamespace           string
	watchFilter              string
	profilerAddress          string
	syncPeriod               time.Duration
	kubeAPIQPS               float32
	kubeAPIBurst             int
	clusterCacheConcurrency  int
	clusterCacheClientQPS    float32
	clusterCacheClientBurst  int
	kairosConfigConcurrency  int
	tokenTTL                 time.Duration
	webhookPort              int
	webhookCertDir           string
	webhookCertName          string
	webhookKeyName           string
	healthAddr               string
	managerOptions           flags.ManagerOptions
	logOptions               *logsv1.LoggingConfiguration
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	o.logOptions = logs.NewOptions()
	logsv1.AddFlags(o.logOptions, fs)
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Enable leader election, so that only one manager is active.")
	fs.DurationVar(&o.leaderElectLeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long non-leaders wait before forcing leadership.")
	fs.DurationVar(&o.leaderElectRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries refreshing leadership before giving up.")
	fs.DurationVar(&o.leaderElectRetryPeriod, "leader-elect-retry-period", 2*time.Second, "How long clients wait between leader election attempts.")
	fs.StringVar(&o.watchNamespace, "namespace", "", "Namespace to reconcile objects in. Empty means all namespaces.")
	fs.StringVar(&o.watchFilter, "watch-filter", "", fmt.Sprintf("Only reconcile objects whose %s label has this value. Empty means all objects.", clusterv1.WatchLabel))
	fs.StringVar(&o.profilerAddress, "profiler-address", "", "Bind address of the pprof profiler (e.g. localhost:6060). Empty disables it.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "Minimum interval at which watched objects are reconciled.")
	fs.Float32Var(&o.kubeAPIQPS, "kube-api-qps", 20, "Queries per second to the management API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 30, "Burst of queries to the management API server.")
	fs.IntVar(&o.clusterCacheConcurrency, "clustercache-concurrency", 100, "Number of clusters the cluster cache processes at once.")
	fs.Float32Var(&o.clusterCacheClientQPS, "clustercache-client-qps", 20, "Queries per second to each workload API server.")
	fs.IntVar(&o.clusterCacheClientBurst, "clustercache-client-burst", 30, "Burst of queries to each workload API server.")
	fs.IntVar(&o.kairosConfigConcurrency, "kairosconfig-concurrency", 10, "Number of KairosConfigs reconciled at once.")
	fs.DurationVar(&o.tokenTTL, "bootstrap-token-ttl", setup.DefaultTokenTTL, "Lifetime of generated join tokens; they are refreshed until the node has joined.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook serving certificate.")
	fs.StringVar(&o.webhookCertName, "webhook-cert-name", "tls.crt", "File name of the webhook serving certificate.")
	fs.StringVar(&o.webhookKeyName, "webhook-key-name", "tls.key", "File name of the webhook serving key.")
	fs.StringVar(&o.healthAddr, "health-addr", ":9440", "Bind address of the health and readiness probes.")
	flags.AddManagerOptions(fs, &o.managerOptions)
	feature.MutableGates.AddFlag(fs)
}

// RBAC for the authorized diagnostics (metrics) endpoint.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	o := &options{}
	o.addFlags(pflag.CommandLine)
	pflag.CommandLine.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		setupLog.Error(err, "Manager failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options) error {
	if err := logsv1.ValidateAndApply(o.logOptions, nil); err != nil {
		return fmt.Errorf("invalid logging flags: %w", err)
	}
	ctrl.SetLogger(klog.Background())

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restConfig.QPS, restConfig.Burst = o.kubeAPIQPS, o.kubeAPIBurst
	restConfig.UserAgent = remote.DefaultClusterAPIUserAgent(setup.ControllerName)

	tlsOptions, metricsOptions, err := flags.GetManagerOptions(o.managerOptions)
	if err != nil {
		return fmt.Errorf("invalid diagnostics flags: %w", err)
	}

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                     scheme,
		LeaderElection:             o.leaderElect,
		LeaderElectionID:           "kairos-bootstrap-manager-leader-election",
		LeaseDuration:              &o.leaderElectLeaseDuration,
		RenewDeadline:              &o.leaderElectRenewDeadline,
		RetryPeriod:                &o.leaderElectRetryPeriod,
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		HealthProbeBindAddress:     o.healthAddr,
		PprofBindAddress:           o.profilerAddress,
		Metrics:                    *metricsOptions,
		Cache:                      setup.CacheOptions(o.watchNamespace, o.syncPeriod),
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:     o.webhookPort,
			CertDir:  o.webhookCertDir,
			CertName: o.webhookCertName,
			KeyName:  o.webhookKeyName,
			TLSOpts:  tlsOptions,
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
	if err := setup.Setup(ctx, mgr, setup.Options{
		WatchFilter:             o.watchFilter,
		TokenTTL:                o.tokenTTL,
		KairosConfigConcurrency: o.kairosConfigConcurrency,
		ClusterCacheConcurrency: o.clusterCacheConcurrency,
		ClusterCacheClientQPS:   o.clusterCacheClientQPS,
		ClusterCacheClientBurst: o.clusterCacheClientBurst,
	}); err != nil {
		return err
	}
	setupLog.Info("Starting manager")
	return mgr.Start(ctx)
}
