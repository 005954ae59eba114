package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeadmv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// Provider names one column of the benchmark.
type Provider string

const (
	// Kairos is our bootstrap manager, built from the work tree.
	Kairos Provider = "kairos"
	// CABPK is Cluster API's kubeadm bootstrap manager at the version the project pins.
	CABPK Provider = "cabpk"
	// Floor is the write floor: a client that writes only what the contract requires.
	Floor Provider = "floor"
)

// resyncSettle is added to the resync window for the reconciles a resync queued to finish.
const resyncSettle = 5 * time.Second

// ResyncWindow is how long writes are counted after a restart with --sync-period=period.
func ResyncWindow(period time.Duration) time.Duration { return period*22/10 + resyncSettle }

// AllProviders is the default set, in the order they run.
var AllProviders = []Provider{Kairos, CABPK, Floor}

// Options configure a benchmark run.
type Options struct {
	// N is the number of worker configs per provider.
	N int
	// Providers to run, in order. Default: AllProviders.
	Providers []Provider
	// SyncPeriod is the --sync-period of the restarted manager whose writes are counted over
	// one resync window. Zero skips the resync window.
	SyncPeriod time.Duration
	// UnrelatedSecrets is how many unrelated Secrets are created to measure memory growth.
	// Zero skips the memory measurement.
	UnrelatedSecrets int
	// FloorCommand runs the write floor as a child process: an executable and the arguments
	// that select the floor (the floor's flags are appended). Required for Floor.
	FloorCommand []string
	// WorkDir receives binaries, kubeconfigs and the managers' logs. Default: a temporary
	// folder, removed by Run unless KeepWorkDir.
	WorkDir     string
	KeepWorkDir bool
	// Quiet is how long no write may arrive before a run counts as finished. Default 3s.
	Quiet time.Duration
	// ReadyTimeout bounds the wait for all configs. Default: 3 minutes or 0.6 s per config.
	ReadyTimeout time.Duration
	// Logf reports progress. Default: discard.
	Logf func(format string, args ...any)
}

// Result is everything one run measured.
type Result struct {
	N                int           `json:"n"`
	KubeVersion      string        `json:"kubeVersion"`
	CAPIVersion      string        `json:"capiVersion,omitempty"`
	SyncPeriod       time.Duration `json:"syncPeriod"`
	UnrelatedSecrets int           `json:"unrelatedSecrets"`
	Quiet            time.Duration `json:"quiet"`
	// Load is the machine's load average (/proc/loadavg) when the run started and ended: the
	// managers share the cores with everything else, and a busy machine slows them.
	Load       [2]string         `json:"load"`
	WorkDir    string            `json:"workDir,omitempty"`
	Runs       []*ProviderResult `json:"runs"`
	byProvider map[Provider]*ProviderResult
}

// Get returns the result of provider p, or nil.
func (r *Result) Get(p Provider) *ProviderResult { return r.byProvider[p] }

// Problems lists every correctness problem of every provider.
func (r *Result) Problems() []string {
	var out []string
	for _, pr := range r.Runs {
		for _, p := range pr.Problems {
			out = append(out, string(pr.Provider)+": "+p)
		}
	}
	return out
}

// ProviderResult is what one provider's run measured.
type ProviderResult struct {
	Provider Provider `json:"provider"`
	// Name is the column title.
	Name   string   `json:"name"`
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	// Limits are the client limits the provider ran with (its defaults).
	Limits Limits `json:"limits"`

	// Seconds from the process start until the last config reported ready.
	Seconds float64 `json:"seconds"`
	// Ready is how many configs reported ready.
	Ready int `json:"ready"`
	// Management and Workload are the requests the proxies forwarded from the process start
	// until no write arrived for Options.Quiet.
	Management Side `json:"management"`
	Workload   Side `json:"workload"`
	// Reconciles of the config controller (controller_runtime_reconcile_total), -1 if not a
	// manager.
	Reconciles int `json:"reconciles"`
	// ReconcileResults splits Reconciles by result.
	ReconcileResults map[string]int `json:"reconcileResults,omitempty"`

	Resync *Resync `json:"resync,omitempty"`
	Memory *Memory `json:"memory,omitempty"`

	// Problems are correctness failures: configs not ready, not exactly one data Secret, a
	// manager that exited.
	Problems []string `json:"problems,omitempty"`

	spec providerSpec
}

// Side summarizes the requests on one side (management or workload API).
type Side struct {
	Writes int `json:"writes"`
	Reads  int `json:"reads"`
	// ClientWrites is the manager's own count of its writes to this side
	// (rest_client_requests_total), -1 when not scraped.
	ClientWrites int     `json:"clientWrites"`
	Breakdown    []Count `json:"breakdown"`
}

// Resync is what a restarted manager wrote over one resync window.
type Resync struct {
	SyncPeriod time.Duration `json:"syncPeriod"`
	Window     time.Duration `json:"window"`
	// Writes is every write on both sides during the window; StartupWrites the part before the
	// first periodic resync could fire (0.9 × the period: controller-runtime jitters it by
	// ±10%), PeriodicWrites the rest.
	Writes         int `json:"writes"`
	StartupWrites  int `json:"startupWrites"`
	PeriodicWrites int `json:"periodicWrites"`
	Reconciles     int `json:"reconciles"`
	// StartupReconciles is how many of the Reconciles happened before 0.9 × the period.
	StartupReconciles int     `json:"startupReconciles"`
	Breakdown         []Count `json:"breakdown"`
}

// Memory is the manager's resident memory around the creation of unrelated Secrets.
type Memory struct {
	Secrets int   `json:"secrets"`
	Before  int64 `json:"before"`
	After   int64 `json:"after"`
}

// Growth is After − Before in bytes.
func (m *Memory) Growth() int64 { return m.After - m.Before }

// providerSpec says how to run one provider.
type providerSpec struct {
	name       string
	kind       configKind
	bin        string
	args       []string // before the local flags
	controller string   // the config controller's name in controller-runtime metrics
	manager    bool     // a controller manager (has metrics, resyncs); false for the floor
	limits     Limits
}

type bench struct {
	o       Options
	env     *framework.Environment
	cfg     *rest.Config
	client  client.Client
	certDir string
	cert    tls.Certificate
	caPEM   []byte
	specs   map[Provider]providerSpec
	// warm stops the warm-up watches (see warmWatchCaches).
	warm chan struct{}
}

func (o *Options) defaults() error {
	if o.N <= 0 {
		return fmt.Errorf("N must be positive, got %d", o.N)
	}
	if len(o.Providers) == 0 {
		o.Providers = AllProviders
	}
	if o.Quiet == 0 {
		o.Quiet = 3 * time.Second
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = max(3*time.Minute, time.Duration(o.N)*600*time.Millisecond)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	for _, p := range o.Providers {
		switch p {
		case Kairos, CABPK:
		case Floor:
			if len(o.FloorCommand) == 0 {
				return errors.New("the write floor needs Options.FloorCommand")
			}
		default:
			return fmt.Errorf("unknown provider %q (want %s, %s or %s)", p, Kairos, CABPK, Floor)
		}
	}
	return nil
}

func (o *Options) wants(p Provider) bool {
	for _, q := range o.Providers {
		if q == p {
			return true
		}
	}
	return false
}

// Run builds what it needs, starts one API server and runs each provider in turn against it.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.WorkDir == "" {
		if o.WorkDir, err = os.MkdirTemp("", "kairos-bench-e2e-"); err != nil {
			return nil, fmt.Errorf("creating a work folder: %w", err)
		}
		if !o.KeepWorkDir {
			defer func() {
				// Keep the managers' logs when something went wrong.
				if err == nil && (res == nil || len(res.Problems()) == 0) {
					_ = os.RemoveAll(o.WorkDir)
					if res != nil {
						res.WorkDir = ""
					}
				}
			}()
		}
	}
	b := &bench{o: o, specs: map[Provider]providerSpec{}}
	defer func() {
		if res != nil {
			res.Load[1] = LoadAverage()
		}
	}()
	res = &Result{N: o.N, SyncPeriod: o.SyncPeriod, UnrelatedSecrets: o.UnrelatedSecrets, Quiet: o.Quiet, WorkDir: o.WorkDir,
		byProvider: map[Provider]*ProviderResult{}, Load: [2]string{LoadAverage()}}
	if err := b.build(res); err != nil {
		return nil, err
	}
	if err := b.startAPIServer(res); err != nil {
		return nil, err
	}
	defer func() { _ = b.env.Stop() }()
	defer close(b.warm)

	for _, p := range o.Providers {
		pr, err := b.runProvider(ctx, p)
		if err != nil {
			return res, fmt.Errorf("%s: %w", p, err)
		}
		res.Runs = append(res.Runs, pr)
		res.byProvider[p] = pr
	}
	return res, nil
}

// build compiles the managers: ours from the work tree, CABPK from the module proxy.
func (b *bench) build(res *Result) error {
	binDir := filepath.Join(b.o.WorkDir, "bin")
	var kairosLimits Limits
	if b.o.wants(Kairos) || b.o.wants(Floor) {
		b.o.Logf("building the Kairos bootstrap manager")
		bin, err := BuildKairos(binDir)
		if err != nil {
			return err
		}
		if kairosLimits, err = DefaultLimits(bin, "kairosconfig-concurrency"); err != nil {
			return fmt.Errorf("reading the Kairos manager's defaults: %w", err)
		}
		b.specs[Kairos] = providerSpec{name: "Kairos", kind: kairosConfigKind, bin: bin, controller: "kairosconfig", manager: true, limits: kairosLimits}
	}
	if b.o.wants(CABPK) {
		version, err := CAPIVersion()
		if err != nil {
			return err
		}
		res.CAPIVersion = version
		bin, err := BuildCABPK(version, b.o.Logf)
		if err != nil {
			return err
		}
		limits, err := DefaultLimits(bin, "kubeadmconfig-concurrency")
		if err != nil {
			return fmt.Errorf("reading CABPK's defaults: %w", err)
		}
		b.specs[CABPK] = providerSpec{name: "CABPK " + version, kind: kubeadmConfigKind, bin: bin, controller: "kubeadmconfig", manager: true, limits: limits}
	}
	if b.o.wants(Floor) {
		// The floor runs at the Kairos manager's limits: it is the best that manager could do
		// with the writes the contract requires.
		b.specs[Floor] = providerSpec{name: "write floor", kind: kairosConfigKind, bin: b.o.FloorCommand[0],
			args: b.o.FloorCommand[1:], limits: kairosLimits}
	}
	return nil
}

func (b *bench) startAPIServer(res *Result) error {
	b.o.Logf("starting kube-apiserver and etcd")
	var files []string
	core, err := framework.CAPICRDFiles()
	if err != nil {
		return err
	}
	files = append(files, core...)
	ours, err := framework.ProjectCRDFiles("bootstrap")
	if err != nil {
		return err
	}
	files = append(files, ours...)
	capiDir, err := framework.ModuleDir(capiModule)
	if err != nil {
		return err
	}
	kubeadm, err := filepath.Glob(filepath.Join(capiDir, "bootstrap", "kubeadm", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(kubeadm) == 0 {
		return fmt.Errorf("finding CABPK's CRDs in %s: %v", capiDir, err)
	}
	files = append(files, kubeadm...)
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return fmt.Errorf("loading CRDs: %w", err)
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme, bootstrapv1.AddToScheme, kubeadmv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	if b.env, err = framework.Start(framework.Options{CRDs: crds, Scheme: scheme}); err != nil {
		return err
	}
	// The orchestrator's own client is not what is measured: it must not be the bottleneck of
	// creating fixtures.
	b.cfg = rest.CopyConfig(b.env.Config)
	b.cfg.QPS, b.cfg.Burst = 1000, 2000
	if b.client, err = client.New(b.cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("creating the orchestrator's client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(b.cfg)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server version: %w", err)
	}
	res.KubeVersion = v.GitVersion
	if err := b.warmWatchCaches(); err != nil {
		return err
	}

	// One serving certificate for the proxies and the managers' webhook servers (no webhook is
	// registered with the API server: fixtures are created before any manager runs, and
	// admission is not what is measured).
	b.certDir = filepath.Join(b.o.WorkDir, "certs")
	if b.caPEM, err = framework.WriteServingCertificate(b.certDir, "127.0.0.1"); err != nil {
		return fmt.Errorf("writing serving certificates: %w", err)
	}
	if b.cert, err = tls.LoadX509KeyPair(filepath.Join(b.certDir, "tls.crt"), filepath.Join(b.certDir, "tls.key")); err != nil {
		return fmt.Errorf("loading the serving certificate: %w", err)
	}
	return nil
}

// watchedResources are the resources both managers under test watch. The API server serves the
// first watch of a resource only once its watch cache has caught up with etcd, about a second
// on a fresh server (client-go lists through watches, WatchListClient): whoever ran first would
// pay it. In a real management cluster Cluster API's own controllers keep these watches open,
// so the benchmark does too before any provider starts. Each provider's own config kind is left
// cold for both alike: CABPK's CRD migrator patches its CRD at start, and a watch already open
// on it would be cut by that change and disturb CABPK.
var watchedResources = []schema.GroupVersionResource{
	{Group: clusterv1.GroupVersion.Group, Version: clusterv1.GroupVersion.Version, Resource: "clusters"},
	{Group: clusterv1.GroupVersion.Group, Version: clusterv1.GroupVersion.Version, Resource: "machines"},
	{Group: clusterv1.GroupVersion.Group, Version: clusterv1.GroupVersion.Version, Resource: "machinepools"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "configmaps"},
}

// warmWatchCaches watches every resource the managers watch, for the whole benchmark, and waits
// until each watch has synced.
func (b *bench) warmWatchCaches() error {
	dc, err := dynamic.NewForConfig(b.cfg)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	var synced []toolscache.InformerSynced
	for _, gvr := range watchedResources {
		synced = append(synced, f.ForResource(gvr).Informer().HasSynced)
	}
	b.warm = make(chan struct{})
	f.Start(b.warm)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("the warm-up watches did not sync within 1m")
	}
	return nil
}

// process is a running provider.
type process struct {
	*framework.Process
	args       []string
	metricsURL string
}

// start runs a provider's binary with only the flags a local run needs: where the API server is
// (through the management proxy), its namespace (so that no provider sees another's objects),
// free local ports, the webhook certificate, and metrics served over plain HTTP. Everything
// else — QPS, burst, concurrency, sync period unless extra sets it — stays at its default.
func (b *bench) start(spec providerSpec, namespace, kubeconfig, logName string, extra ...string) (*process, error) {
	args := append([]string{}, spec.args...)
	p := &process{}
	if spec.manager {
		ports := make([]int, 3)
		for i := range ports {
			port, err := framework.FreePort()
			if err != nil {
				return nil, err
			}
			ports[i] = port
		}
		args = append(args,
			"--kubeconfig="+kubeconfig,
			"--namespace="+namespace,
			"--webhook-port="+strconv.Itoa(ports[0]),
			"--webhook-cert-dir="+b.certDir,
			"--health-addr=127.0.0.1:"+strconv.Itoa(ports[1]),
			"--diagnostics-address=127.0.0.1:"+strconv.Itoa(ports[2]),
			"--insecure-diagnostics",
		)
		p.metricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics"
	} else {
		args = append(args,
			"--kubeconfig="+kubeconfig,
			"--workload-kubeconfig="+workloadKubeconfigPath(kubeconfig),
			"--namespace="+namespace,
			"--kube-api-qps="+strconv.FormatFloat(float64(spec.limits.QPS), 'f', -1, 32),
			"--kube-api-burst="+strconv.Itoa(spec.limits.Burst),
			"--workload-qps="+strconv.FormatFloat(float64(spec.limits.WorkloadQPS), 'f', -1, 32),
			"--workload-burst="+strconv.Itoa(spec.limits.WorkloadBurst),
			"--concurrency="+strconv.Itoa(spec.limits.Concurrency),
		)
	}
	args = append(args, extra...)
	proc, err := framework.StartProcess(logName, filepath.Join(b.o.WorkDir, logName+".log"), []string{"KUBECONFIG="}, spec.bin, args...)
	if err != nil {
		return nil, err
	}
	p.Process, p.args = proc, args
	return p, nil
}

func (b *bench) runProvider(ctx context.Context, p Provider) (*ProviderResult, error) {
	spec := b.specs[p]
	namespace := "bench-" + string(p)
	pr := &ProviderResult{Provider: p, Name: spec.name, Binary: spec.bin, Limits: spec.limits, Reconciles: -1, spec: spec}
	pr.Management.ClientWrites, pr.Workload.ClientWrites = -1, -1

	// Each provider gets its own pair of proxies: everything they see comes from that
	// provider's process.
	mgmt, wl, kubeconfigPath, err := b.prepare(ctx, spec, namespace, string(p))
	if err != nil {
		return nil, err
	}
	defer mgmt.Close()
	defer wl.Close()
	defer func() {
		for _, px := range []*Proxy{mgmt, wl} {
			if err := px.WriteTrace(filepath.Join(b.o.WorkDir, string(p)+"-"+px.Name+".requests.jsonl")); err != nil {
				b.o.Logf("%v", err)
			}
		}
	}()

	w, err := watchReady(ctx, b.cfg, spec.kind, namespace, b.o.N)
	if err != nil {
		return nil, err
	}
	defer w.Stop()

	b.o.Logf("%s: running until all %d configs are ready", spec.name, b.o.N)
	start := time.Now()
	proc, err := b.start(spec, namespace, kubeconfigPath, string(p))
	if err != nil {
		return nil, err
	}
	pr.Args = proc.args
	running := true
	defer func() {
		if running {
			_ = proc.Stop(15 * time.Second)
		}
	}()

	if err := b.waitReady(ctx, w, proc, !spec.manager); err != nil {
		pr.Problems = append(pr.Problems, err.Error())
	}
	last, ready := w.Last()
	pr.Ready = ready
	if ready > 0 {
		pr.Seconds = last.Sub(start).Seconds()
	}
	end := waitQuiet(ctx, b.o.Quiet, time.Minute, mgmt, wl)
	pr.Management = SideOf(mgmt.Between(start, end))
	pr.Workload = SideOf(wl.Between(start, end))
	pr.Problems = append(pr.Problems, verifyData(ctx, b.client, spec.kind, namespace, b.o.N)...)

	if !spec.manager {
		// The floor exits once it has written everything.
		if err := waitExit(proc, 30*time.Second); err != nil {
			pr.Problems = append(pr.Problems, err.Error())
		}
		running = false
		b.o.Logf("%s: %.1f s, %d management writes, %d workload writes", spec.name, pr.Seconds, pr.Management.Writes, pr.Workload.Writes)
		return pr, nil
	}

	samples, err := Scrape(ctx, proc.metricsURL)
	if err != nil {
		pr.Problems = append(pr.Problems, err.Error())
	} else {
		pr.Reconciles = Reconciles(samples, spec.controller)
		pr.ReconcileResults = ReconcileResults(samples, spec.controller)
		pr.Management.ClientWrites = ClientWrites(samples, mgmt.Host())
		pr.Workload.ClientWrites = ClientWrites(samples, wl.Host())
	}
	b.o.Logf("%s: %.1f s, %d management writes, %d workload writes, %d reconciles", spec.name, pr.Seconds,
		pr.Management.Writes, pr.Workload.Writes, pr.Reconciles)

	if b.o.UnrelatedSecrets > 0 {
		if pr.Memory, err = b.measureMemory(ctx, proc, namespace); err != nil {
			return pr, err
		}
	}
	if err := checkRunning(proc); err != nil {
		pr.Problems = append(pr.Problems, err.Error())
	}
	running = false
	// controller-runtime gives the manager's runnables up to 30 s to end after SIGTERM.
	if err := proc.Stop(45 * time.Second); err != nil {
		pr.Problems = append(pr.Problems, fmt.Sprintf("stopping the manager: %v", err))
	}

	if b.o.SyncPeriod > 0 {
		if pr.Resync, err = b.resyncWindow(ctx, spec, namespace, kubeconfigPath, string(p)+"-resync", mgmt, wl, pr); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

// prepare starts a provider's management and workload proxies, creates its fixture in
// namespace and writes the kubeconfig (through the management proxy) its process gets.
func (b *bench) prepare(ctx context.Context, spec providerSpec, namespace, name string) (mgmt, wl *Proxy, kubeconfigPath string, err error) {
	if mgmt, err = StartProxy("management", b.env.Config, b.cert, b.caPEM); err != nil {
		return nil, nil, "", err
	}
	if wl, err = StartProxy("workload", b.env.Config, b.cert, b.caPEM); err != nil {
		_ = mgmt.Close()
		return nil, nil, "", err
	}
	defer func() {
		if err != nil {
			_ = mgmt.Close()
			_ = wl.Close()
		}
	}()
	wlKubeconfig, err := wl.Kubeconfig(clusterName)
	if err != nil {
		return nil, nil, "", err
	}
	host, portStr, err := net.SplitHostPort(wl.Host())
	if err != nil {
		return nil, nil, "", err
	}
	port, _ := strconv.Atoi(portStr)
	b.o.Logf("%s: creating an initialized Cluster and %d worker %ss in %s", spec.name, b.o.N, spec.kind.Kind, namespace)
	f := &fixture{namespace: namespace, kind: spec.kind, n: b.o.N}
	if err := f.create(ctx, b.client, host, int32(port), wlKubeconfig); err != nil {
		return nil, nil, "", err
	}
	mgmtKubeconfig, err := mgmt.Kubeconfig("management")
	if err != nil {
		return nil, nil, "", err
	}
	kubeconfigPath = filepath.Join(b.o.WorkDir, name+".kubeconfig")
	if err := os.WriteFile(kubeconfigPath, mgmtKubeconfig, 0o600); err != nil {
		return nil, nil, "", fmt.Errorf("writing %s: %w", kubeconfigPath, err)
	}
	// The managers read the workload kubeconfig from the Cluster's Secret; the floor from here.
	if err := os.WriteFile(workloadKubeconfigPath(kubeconfigPath), wlKubeconfig, 0o600); err != nil {
		return nil, nil, "", fmt.Errorf("writing the workload kubeconfig: %w", err)
	}
	return mgmt, wl, kubeconfigPath, nil
}

// workloadKubeconfigPath is where prepare writes the workload kubeconfig next to a management
// kubeconfig.
func workloadKubeconfigPath(kubeconfig string) string {
	return strings.TrimSuffix(kubeconfig, ".kubeconfig") + "-workload.kubeconfig"
}

// waitReady waits until every config reported ready, the timeout passes, or the process
// exits (expected of the floor once it is done, a failure of a manager).
func (b *bench) waitReady(ctx context.Context, w *readyWatch, proc *process, mayExit bool) error {
	timeout := time.NewTimer(b.o.ReadyTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var exitedAt time.Time
	for {
		select {
		case <-w.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			_, n := w.Last()
			return fmt.Errorf("%d of %d configs ready after %s", n, w.want, b.o.ReadyTimeout)
		case <-tick.C:
			exited, err := proc.Exited()
			if !exited {
				continue
			}
			if !mayExit || err != nil {
				return fmt.Errorf("%s exited before all configs were ready (%v); log: %s", proc.Name, err, proc.LogPath)
			}
			// The last status events may still be on their way.
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			} else if time.Since(exitedAt) > 10*time.Second {
				_, n := w.Last()
				return fmt.Errorf("%s finished with %d of %d configs ready; log: %s", proc.Name, n, w.want, proc.LogPath)
			}
		}
	}
}

// waitQuiet returns once no write has arrived at any of the proxies for quiet, or after limit:
// the trailing reconciles a status patch triggers are part of the cost of a config.
func waitQuiet(ctx context.Context, quiet, limit time.Duration, proxies ...*Proxy) time.Time {
	deadline := time.Now().Add(limit)
	begin := time.Now()
	for {
		last := begin
		for _, p := range proxies {
			if t := p.LastWrite(); t.After(last) {
				last = t
			}
		}
		now := time.Now()
		if now.Sub(last) >= quiet || now.After(deadline) || ctx.Err() != nil {
			return now
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitExit(proc *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		exited, err := proc.Exited()
		if exited {
			if err != nil {
				return fmt.Errorf("%s failed: %v; log: %s", proc.Name, err, proc.LogPath)
			}
			return nil
		}
		if time.Now().After(deadline) {
			_ = proc.Stop(5 * time.Second)
			return fmt.Errorf("%s did not finish within %s after all configs were ready", proc.Name, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkRunning(proc *process) error {
	if exited, err := proc.Exited(); exited {
		return fmt.Errorf("%s exited (%v); log: %s", proc.Name, err, proc.LogPath)
	}
	return nil
}

// measureMemory reads the manager's resident memory, creates unrelated Secrets in its
// namespace, gives its informers time to see them, and reads it again.
func (b *bench) measureMemory(ctx context.Context, proc *process, namespace string) (*Memory, error) {
	m := &Memory{Secrets: b.o.UnrelatedSecrets}
	var err error
	if m.Before, err = RSS(proc.Pid()); err != nil {
		return nil, err
	}
	b.o.Logf("creating %d unrelated Secrets", m.Secrets)
	if err := createUnrelatedSecrets(ctx, b.client, namespace, m.Secrets); err != nil {
		return nil, err
	}
	time.Sleep(5 * time.Second)
	if m.After, err = RSS(proc.Pid()); err != nil {
		return nil, err
	}
	return m, nil
}

// controllerWorkersStarted is what controller-runtime logs when a controller's workers start
// (pkg/internal/controller: after its caches synced).
const controllerWorkersStarted = "Starting workers"

// resyncWindow restarts the manager with --sync-period while every config is ready and every
// node still pending (no Machine has a node), and counts its writes over ResyncWindow: the
// start-up reconcile of every config and the first periodic resync. client-go fires an
// informer's first resync one or two periods after the manager starts (two when the
// controller's handler was added after the informer's resync timer started, as
// controller-runtime does), each period jittered by ±10%: the window must reach 2.2 periods.
func (b *bench) resyncWindow(ctx context.Context, spec providerSpec, namespace, kubeconfig, logName string, mgmt, wl *Proxy, pr *ProviderResult) (*Resync, error) {
	period := b.o.SyncPeriod
	r := &Resync{SyncPeriod: period, Window: ResyncWindow(period)}
	b.o.Logf("%s: restarted with --sync-period=%s, counting writes for %s", spec.name, period, r.Window)
	start := time.Now()
	proc, err := b.start(spec, namespace, kubeconfig, logName, "--sync-period="+period.String())
	if err != nil {
		return nil, err
	}
	defer func() { _ = proc.Stop(15 * time.Second) }()
	// The informers' resync clock starts when they do, once the manager has started (and, with
	// leader election, led): the window is counted from its controllers' workers starting, not
	// from the process', so that a slow start does not eat into it. Writes are counted from the
	// process' start all the same.
	if err := waitOutput(ctx, proc, controllerWorkersStarted, 2*time.Minute); err != nil {
		return nil, err
	}
	started := time.Now()
	// Sample the reconcile counter every second (the metrics endpoint costs the API server
	// nothing), to tell the start-up reconciles from the periodic resync's.
	periodic := started.Add(period * 9 / 10)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Now().Before(started.Add(r.Window)) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if time.Now().Before(periodic) {
			if samples, err := Scrape(ctx, proc.metricsURL); err == nil {
				r.StartupReconciles = Reconciles(samples, spec.controller)
			}
		}
	}
	end := time.Now()
	if err := checkRunning(proc); err != nil {
		pr.Problems = append(pr.Problems, err.Error())
		return r, nil
	}
	samples, err := Scrape(ctx, proc.metricsURL)
	if err != nil {
		pr.Problems = append(pr.Problems, err.Error())
	} else {
		r.Reconciles = Reconciles(samples, spec.controller)
	}
	reqs := append(mgmt.Between(start, end), wl.Between(start, end)...)
	for _, q := range reqs {
		if !q.IsWrite() {
			continue
		}
		r.Writes++
		if q.At.Before(periodic) {
			r.StartupWrites++
		} else {
			r.PeriodicWrites++
		}
	}
	mgmtReqs, wlReqs := mgmt.Between(start, end), wl.Between(start, end)
	for _, c := range Breakdown(mgmtReqs, Request.IsWrite) {
		r.Breakdown = append(r.Breakdown, Count{What: "management " + c.What, N: c.N})
	}
	for _, c := range Breakdown(wlReqs, Request.IsWrite) {
		r.Breakdown = append(r.Breakdown, Count{What: "workload " + c.What, N: c.N})
	}
	b.o.Logf("%s: %d writes in the resync window (%d at start-up, %d later), %d reconciles (%d at start-up, %d later)", spec.name,
		r.Writes, r.StartupWrites, r.PeriodicWrites, r.Reconciles, r.StartupReconciles, r.Reconciles-r.StartupReconciles)
	return r, nil
}

// LoadAverage returns the 1, 5 and 15 minute load averages, or "?".
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// SideOf counts the writes and reads of one side's requests, with their breakdown; ClientWrites
// is left to the caller (-1: not scraped).
func SideOf(reqs []Request) Side {
	s := Side{ClientWrites: -1, Breakdown: Breakdown(reqs, nil)}
	for _, r := range reqs {
		switch {
		case r.IsWrite():
			s.Writes++
		case r.Verb == "get" || r.Verb == "list":
			s.Reads++
		}
	}
	return s
}
