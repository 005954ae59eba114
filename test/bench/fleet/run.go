// Package fleetbench is `make bench-fleet` (issue 35, item 3): the unmodified Kairos
// control-plane and bootstrap managers, built from the work tree and run as processes at their
// default flags against a real management kube-apiserver (envtest assets), with Cluster API
// core, manage N single-node workload clusters served by test/fleet in this process; the
// benchmark measures what they cost per cluster in steady state over a resync window.
//
// What runs where:
//
//   - kube-apiserver and etcd: processes (test/framework, envtest assets).
//   - The control-plane and bootstrap managers: processes, the binaries `go build ./controlplane`
//     and `go build ./bootstrap` give, with only the flags a local run needs (kubeconfig, webhook
//     port and certificates, probe and metrics addresses, metrics over plain HTTP), plus
//     --sync-period when Options.SyncPeriod is set. Their webhooks are registered with the API
//     server and served by them. Each talks to the management API server through its own
//     counting proxy (test/bench/e2e.Proxy), and to the workload clusters directly (counted by
//     the fleet, per client by user agent).
//   - Cluster API core (its exported Cluster and Machine reconcilers and ClusterCache, at the
//     version the test module pins, with its manager's defaults): in this process, talking to
//     the API server directly. Its webhooks are not installed: the fixture's objects are
//     complete as created. Its CPU is not measured.
//   - The infrastructure provider: in this process (capi.go), on the test infrastructure's
//     KairosSimCluster and KairosSimMachine kinds: the fixture provisions each KairosSimCluster,
//     and a KairosSimMachine gets the provider ID, address and host name of the fleet cluster
//     that boots when its Machine has bootstrap data.
//   - The fleet (test/fleet): in this process; one simulated API server, etcd member and kubelet
//     per cluster.
//
// The managers' and the bench's CPU compete for the same cores: the numbers are those of a
// whole management stack on one machine.
package fleetbench

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	cpsetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/bench/e2e"
	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/fleet"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// kubernetesVersion is what the control planes ask for and the simulated nodes run.
const kubernetesVersion = "v1.34.1"

// Namespace holds every benchmark cluster.
const Namespace = "fleet"

// Manager names one of the two managers under test.
type Manager string

const (
	ControlPlane Manager = "controlplane"
	Bootstrap    Manager = "bootstrap"
)

// Managers are the managers under test, in the order they are reported.
var Managers = []Manager{ControlPlane, Bootstrap}

// controllerName is each manager's main controller in controller-runtime's metrics.
var controllerName = map[Manager]string{ControlPlane: "kairoscontrolplane", Bootstrap: "kairosconfig"}

// userAgent is the part of each manager's workload clients' user agent that names it.
var userAgent = map[Manager]string{ControlPlane: cpsetup.ControllerName, Bootstrap: bootstrapsetup.ControllerName}

// Options configure one benchmark run at one N.
type Options struct {
	// N is the number of single-node workload clusters.
	N int
	// Distribution of the clusters: k0s, k3s, or mixed (every other one k3s). Default k0s.
	Distribution string
	// SyncPeriod, when set, is passed to both managers as --sync-period; zero leaves their
	// default (read from their --help), which is what issue 35 asks to measure.
	SyncPeriod time.Duration
	// Window is how long steady state is measured. Default: 1.1 × the sync period plus 15 s,
	// so that every informer of both managers resyncs at least once inside it (client-go jitters
	// each resync period by up to +10%).
	Window time.Duration
	// Quiet is how long no write may arrive (outside leases) before the window starts.
	// Default 10 s.
	Quiet time.Duration
	// ReadyStall is how long the wait for every cluster to be ready goes on without a cluster
	// becoming ready before the run fails. Default 5 min. ReadyTimeout bounds the whole wait.
	// Default 30 min + 3 s a cluster.
	ReadyStall, ReadyTimeout time.Duration
	// WorkDir receives binaries, kubeconfigs, logs and request traces. Default: a temporary
	// folder, removed unless KeepWorkDir or the run failed.
	WorkDir     string
	KeepWorkDir bool
	// FirstNodeAddress is the first node's address (the fleet's Options.FirstNodeAddress: each
	// node's etcd member listens at its own address on port 2379, so two fleets running at
	// once need ranges of their own). Default 127.102.0.1; the smoke test uses another.
	FirstNodeAddress netip.Addr
	// Logf reports progress. Default: discard.
	Logf func(format string, args ...any)
}

func (o *Options) defaults() error {
	if o.N <= 0 {
		return fmt.Errorf("N must be positive, got %d", o.N)
	}
	switch o.Distribution {
	case "":
		o.Distribution = "k0s"
	case "k0s", "k3s", "mixed":
	default:
		return fmt.Errorf("distribution %q: want k0s, k3s or mixed", o.Distribution)
	}
	if !o.FirstNodeAddress.IsValid() {
		o.FirstNodeAddress = netip.AddrFrom4([4]byte{127, 102, 0, 1})
	}
	if o.Quiet == 0 {
		o.Quiet = 10 * time.Second
	}
	if o.ReadyStall == 0 {
		o.ReadyStall = 5 * time.Minute
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30*time.Minute + time.Duration(o.N)*3*time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// WindowFor is the default measurement window for a sync period.
func WindowFor(period time.Duration) time.Duration { return period*11/10 + 15*time.Second }

// Result is what one run at one N measured.
type Result struct {
	N            int    `json:"n"`
	Distribution string `json:"distribution"`
	KubeVersion  string `json:"kubeVersion"`
	// SyncPeriod is the managers' sync period (their default unless SyncPeriodFlag).
	SyncPeriod     time.Duration `json:"syncPeriod"`
	SyncPeriodFlag bool          `json:"syncPeriodFlag"`
	Window         time.Duration `json:"window"`
	// Resyncs is Window / SyncPeriod: the number of resyncs the per-resync figures divide by.
	Resyncs float64 `json:"resyncs"`
	// ReadySeconds is how long after the fixture was created every cluster was ready.
	ReadySeconds float64 `json:"readySeconds"`
	Ready        int     `json:"ready"`
	// Load is /proc/loadavg at the start and end of the window.
	Load     [2]string                 `json:"load"`
	Managers map[Manager]*ManagerStats `json:"managers"`
	// CAPIWorkload is what Cluster API core (in the bench process) asked the workload clusters
	// in the window, for comparison.
	CAPIWorkload fleet.Stats `json:"capiWorkload"`
	// Etcd sums the members' handshakes and calls in the window.
	Etcd fleet.EtcdStats `json:"etcd"`
	// Unauthorized counts workload requests refused (any client) during the whole run.
	Unauthorized uint64 `json:"unauthorized"`
	// Problems are correctness failures.
	Problems []string `json:"problems,omitempty"`
	WorkDir  string   `json:"workDir,omitempty"`
}

// ManagerStats is one manager's steady state over the window.
type ManagerStats struct {
	Args []string `json:"args"`
	// CPUSeconds is the process' user+system CPU time over the window; RSS its resident memory
	// at the end of it.
	CPUSeconds float64 `json:"cpuSeconds"`
	RSS        int64   `json:"rss"`
	// Management counts its requests to the management API server in the window (through its
	// proxy); ManagementLeases the Lease writes among them (leader election).
	Management       e2e.Side `json:"management"`
	ManagementLeases int      `json:"managementLeases"`
	// Workload counts its requests to the workload clusters in the window (the fleet's count).
	Workload fleet.Stats `json:"workload"`
	// Reconciles of its main controller (kairoscontrolplane, kairosconfig) in the window: at
	// least N when a resync reached every object.
	Reconciles int `json:"reconciles"`
	// WholeRun compares, from the manager's start to the end of the window, the writes the
	// proxies and the fleet counted with the manager's own client metrics
	// (rest_client_requests_total), -1 when not scraped.
	WholeRun Crosscheck `json:"wholeRun"`
}

// Crosscheck pairs counts made outside a manager with its own.
type Crosscheck struct {
	ManagementWrites       int `json:"managementWrites"`
	ManagementClientWrites int `json:"managementClientWrites"`
	WorkloadWrites         int `json:"workloadWrites"`
	WorkloadClientWrites   int `json:"workloadClientWrites"`
	// WorkloadRequests is every request the fleet counted from the manager (reads, watches,
	// writes, refusals); WorkloadClientRequests client-go's count of its requests to any host but
	// the management proxy. They may differ by the requests in flight when both were read.
	WorkloadRequests       int `json:"workloadRequests"`
	WorkloadClientRequests int `json:"workloadClientRequests"`
}

// PerClusterPerResync divides a count over the window by N and the number of resyncs.
func (r *Result) PerClusterPerResync(v float64) float64 {
	if r.N == 0 || r.Resyncs == 0 {
		return 0
	}
	return v / float64(r.N) / r.Resyncs
}

// CPUPerMinute is a manager's CPU seconds per minute over the window.
func (r *Result) CPUPerMinute(m Manager) float64 {
	if r.Window == 0 || r.Managers[m] == nil {
		return 0
	}
	return r.Managers[m].CPUSeconds / r.Window.Minutes()
}

type bench struct {
	o       Options
	env     *framework.Environment
	client  client.Client
	scheme  *runtime.Scheme
	fleet   *fleet.Fleet
	sites   map[string]*site
	cert    tls.Certificate
	caPEM   []byte
	procs   map[Manager]*managerProc
	proxies map[Manager]*e2e.Proxy
}

type managerProc struct {
	*framework.Process
	args       []string
	metricsURL string
	healthURL  string
	started    time.Time
}

var setLoggerOnce sync.Once

// Run runs the benchmark at one N.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	// Cluster API's and controller-runtime's logs in this process are not what is measured.
	setLoggerOnce.Do(func() {
		ctrl.SetLogger(logr.Discard())
		klog.SetLogger(logr.Discard())
	})
	if o.WorkDir == "" {
		if o.WorkDir, err = os.MkdirTemp("", "kairos-bench-fleet-"); err != nil {
			return nil, err
		}
		if !o.KeepWorkDir {
			defer func() {
				if err == nil && res != nil && len(res.Problems) == 0 {
					_ = os.RemoveAll(o.WorkDir)
					res.WorkDir = ""
				}
			}()
		}
	}
	res = &Result{N: o.N, Distribution: o.Distribution, WorkDir: o.WorkDir, Managers: map[Manager]*ManagerStats{}}
	b := &bench{o: o, sites: map[string]*site{}, procs: map[Manager]*managerProc{}, proxies: map[Manager]*e2e.Proxy{}}
	defer b.stop()

	bins, err := b.build()
	if err != nil {
		return nil, err
	}
	if res.SyncPeriod = o.SyncPeriod; res.SyncPeriod == 0 {
		if res.SyncPeriod, err = defaultSyncPeriod(bins[ControlPlane]); err != nil {
			return nil, err
		}
		bp, err := defaultSyncPeriod(bins[Bootstrap])
		if err != nil {
			return nil, err
		}
		if bp != res.SyncPeriod {
			return nil, fmt.Errorf("the managers' default sync periods differ (%s, %s): the window needs one", res.SyncPeriod, bp)
		}
	} else {
		res.SyncPeriodFlag = true
	}
	if res.Window = o.Window; res.Window == 0 {
		res.Window = WindowFor(res.SyncPeriod)
	}
	res.Resyncs = res.Window.Seconds() / res.SyncPeriod.Seconds()

	if err := b.startAPIServer(res); err != nil {
		return nil, err
	}
	if b.fleet, err = fleet.New(fleet.Options{FirstNodeAddress: o.FirstNodeAddress, Agents: []string{userAgent[ControlPlane], userAgent[Bootstrap]}}); err != nil {
		return nil, err
	}
	if err := b.prepareSites(); err != nil {
		return nil, err
	}
	capiCtx, stopCAPI := context.WithCancel(ctx)
	defer stopCAPI()
	o.Logf("starting Cluster API core and the infrastructure provider (in process)")
	capiDone, err := startCAPI(capiCtx, b.env.Config, b.scheme, b.sites, b.fleet)
	if err != nil {
		return nil, err
	}
	defer func() { stopCAPI(); <-capiDone }()
	if err := b.startManagers(ctx, bins, res); err != nil {
		return res, err
	}

	o.Logf("creating %d single-node clusters (%s) in namespace %s", o.N, o.Distribution, Namespace)
	created := time.Now()
	if err := b.createFixture(ctx); err != nil {
		return res, err
	}
	o.Logf("waiting until every cluster is ready (giving up after %s without progress)", o.ReadyStall)
	ready, err := b.waitReady(ctx, o.ReadyStall, o.ReadyTimeout)
	res.Ready = ready
	if err != nil {
		res.Problems = append(res.Problems, err.Error())
		return res, nil
	}
	res.ReadySeconds = time.Since(created).Seconds()
	o.Logf("%d clusters ready after %.1f s; waiting for %s without writes", ready, res.ReadySeconds, o.Quiet)
	b.waitQuiet(ctx, o.Quiet, 5*time.Minute)
	if err := b.measure(ctx, res); err != nil {
		return res, err
	}
	res.Problems = append(res.Problems, b.checkStillReady(ctx)...)
	for m, p := range b.procs {
		if exited, err := p.Exited(); exited {
			res.Problems = append(res.Problems, fmt.Sprintf("%s manager exited (%v); log: %s", m, err, p.LogPath))
		}
	}
	return res, ctx.Err()
}

func (b *bench) stop() {
	for _, p := range b.procs {
		_ = p.Stop(45 * time.Second)
	}
	for m, p := range b.proxies {
		_ = p.WriteTrace(filepath.Join(b.o.WorkDir, string(m)+"-management.requests.jsonl"))
		_ = p.Close()
	}
	if b.fleet != nil {
		b.fleet.Close()
	}
	for _, s := range b.sites {
		if s.booted() == nil {
			_ = s.listener.Close()
		}
	}
	if b.env != nil {
		_ = b.env.Stop()
	}
}

// build compiles both managers from the work tree, into a cache folder per work tree: go build
// relinks a binary only when it is out of date (its build ID), which saves about 15 s of CPU a
// run (two links) when nothing changed.
func (b *bench) build() (map[Manager]string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := e2e.CacheDir()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "bench-fleet", hex.EncodeToString(sum[:6]))
	b.o.Logf("building the control-plane and bootstrap managers")
	cp, err := framework.BuildBinary("./controlplane", dir, "kairos-controlplane-manager")
	if err != nil {
		return nil, fmt.Errorf("building the control-plane manager: %w", err)
	}
	bs, err := e2e.BuildKairos(dir)
	if err != nil {
		return nil, err
	}
	return map[Manager]string{ControlPlane: cp, Bootstrap: bs}, nil
}

// defaultSyncPeriod reads a manager's --sync-period default from its --help.
func defaultSyncPeriod(bin string) (time.Duration, error) {
	out, _ := execOutput(bin, "--help")
	m := regexp.MustCompile(`(?m)--sync-period\s.*\(default ([0-9a-z.]+)\)\s*$`).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no default for --sync-period in %s --help", filepath.Base(bin))
	}
	return time.ParseDuration(m[1])
}

func (b *bench) startAPIServer(res *Result) error {
	b.o.Logf("starting kube-apiserver and etcd")
	var files []string
	core, err := framework.CAPICRDFiles()
	if err != nil {
		return err
	}
	ours, err := framework.ProjectCRDFiles("bootstrap", "controlplane")
	if err != nil {
		return err
	}
	infra, err := infrastructure.CRDFiles()
	if err != nil {
		return err
	}
	files = append(append(append(files, core...), ours...), infra...)
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	b.scheme = runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme, infrav1.AddToScheme} {
		if err := add(b.scheme); err != nil {
			return err
		}
	}
	if b.env, err = framework.Start(framework.Options{
		CRDs:        crds,
		WebhookDirs: []string{filepath.Join(root, "bootstrap", "config", "webhook"), filepath.Join(root, "controlplane", "config", "webhook")},
		Scheme:      b.scheme,
	}); err != nil {
		return err
	}
	cfg := rest.CopyConfig(b.env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	if b.client, err = client.New(cfg, client.Options{Scheme: b.scheme}); err != nil {
		return err
	}
	b.env.Config = cfg
	if v, err := serverVersion(cfg); err == nil {
		res.KubeVersion = v
	}
	certDir := filepath.Join(b.o.WorkDir, "certs")
	if b.caPEM, err = framework.WriteServingCertificate(certDir, "127.0.0.1"); err != nil {
		return err
	}
	b.cert, err = tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	return err
}

// prepareSites makes every site's CAs and API listener.
func (b *bench) prepareSites() error {
	for i := range b.o.N {
		name := fmt.Sprintf("site-%05d", i)
		dist := fleet.K0s
		if b.o.Distribution == "k3s" || (b.o.Distribution == "mixed" && i%2 == 1) {
			dist = fleet.K3s
		}
		ca, err := fleet.NewCA("kubernetes-ca")
		if err != nil {
			return err
		}
		etcd, err := fleet.NewCA("etcd-ca")
		if err != nil {
			return err
		}
		s, err := newSite(name, dist, ca, etcd)
		if err != nil {
			return err
		}
		b.sites[name] = s
	}
	return nil
}

// startManagers points each provider's webhooks at its manager, starts both behind their
// proxies and waits until they are ready (webhooks served).
func (b *bench) startManagers(ctx context.Context, bins map[Manager]string, res *Result) error {
	wh := b.env.WebhookInstallOptions
	for _, m := range Managers {
		ports := make([]int, 3)
		for i := range ports {
			p, err := framework.FreePort()
			if err != nil {
				return err
			}
			ports[i] = p
		}
		if err := b.pointWebhooks(ctx, string(m)+"-", wh.LocalServingPort, ports[0]); err != nil {
			return err
		}
		px, err := e2e.StartProxy(string(m), b.env.Config, b.cert, b.caPEM)
		if err != nil {
			return err
		}
		b.proxies[m] = px
		kc, err := px.Kubeconfig("management")
		if err != nil {
			return err
		}
		kcPath := filepath.Join(b.o.WorkDir, string(m)+".kubeconfig")
		if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
			return err
		}
		args := []string{
			"--kubeconfig=" + kcPath,
			"--webhook-port=" + strconv.Itoa(ports[0]),
			"--webhook-cert-dir=" + wh.LocalServingCertDir,
			"--health-addr=127.0.0.1:" + strconv.Itoa(ports[1]),
			"--diagnostics-address=127.0.0.1:" + strconv.Itoa(ports[2]),
			// Metrics over plain HTTP: scraping an authorized endpoint would itself send
			// TokenReviews and SubjectAccessReviews through the proxy.
			"--insecure-diagnostics",
		}
		if b.o.SyncPeriod > 0 {
			args = append(args, "--sync-period="+b.o.SyncPeriod.String())
		}
		name := "kairos-" + string(m) + "-manager"
		p, err := framework.StartProcess(name, filepath.Join(b.o.WorkDir, name+".log"), []string{"KUBECONFIG="}, bins[m], args...)
		if err != nil {
			return err
		}
		mp := &managerProc{Process: p, args: args, started: time.Now(),
			metricsURL: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics",
			healthURL:  "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"}
		b.procs[m] = mp
		res.Managers[m] = &ManagerStats{Args: args}
	}
	for _, m := range Managers {
		if err := waitHTTP(ctx, b.procs[m], time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// pointWebhooks moves the webhooks of the configurations named with prefix (framework.Start
// names them after the provider's folder) from envtest's local port to port.
func (b *bench) pointWebhooks(ctx context.Context, prefix string, from, to int) error {
	n, err := clusterctlrepo.RepointWebhookConfigurations(ctx, b.client,
		func(o client.Object) bool { return strings.HasPrefix(o.GetName(), prefix) },
		func(cc *admissionv1.WebhookClientConfig) (bool, error) {
			if cc.URL != nil {
				u := strings.Replace(*cc.URL, ":"+strconv.Itoa(from)+"/", ":"+strconv.Itoa(to)+"/", 1)
				cc.URL = &u
			}
			return true, nil
		})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no webhook configurations named %s*", prefix)
	}
	return nil
}

// waitHTTP waits until a manager's readiness endpoint answers 200 (its webhook server serves).
func waitHTTP(ctx context.Context, p *managerProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited during start-up (%v); log: %s", p.Name, err, p.LogPath)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.healthURL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after %s; log: %s", p.Name, timeout, p.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitQuiet returns once no write but a Lease's has reached either manager's proxy for quiet,
// or after limit.
func (b *bench) waitQuiet(ctx context.Context, quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	begin := time.Now()
	lastWorkload := b.workloadWrites()
	lastChange := begin
	for {
		last := lastChange
		for _, p := range b.proxies {
			if t := p.LastWrite(); t.After(last) {
				last = t
			}
		}
		if w := b.workloadWrites(); w != lastWorkload {
			lastWorkload, lastChange, last = w, time.Now(), time.Now()
		}
		now := time.Now()
		if now.Sub(last) >= quiet || now.After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// workloadWrites sums the managers' writes to every workload cluster.
func (b *bench) workloadWrites() uint64 {
	var n uint64
	for _, c := range b.fleet.Clusters() {
		for i := range Managers {
			n += c.AgentStats(i).Writes
		}
	}
	return n
}

type snapshot struct {
	at       time.Time
	cpu      map[Manager]float64
	workload map[Manager]fleet.Stats
	capi     fleet.Stats
	etcd     fleet.EtcdStats
	metrics  map[Manager][]e2e.Sample
}

func (b *bench) snapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{at: time.Now(), cpu: map[Manager]float64{}, workload: map[Manager]fleet.Stats{}, metrics: map[Manager][]e2e.Sample{}}
	for i, m := range Managers {
		cpu, err := e2e.CPUSeconds(b.procs[m].Pid())
		if err != nil {
			return nil, err
		}
		s.cpu[m] = cpu
		var sum fleet.Stats
		for _, c := range b.fleet.Clusters() {
			sum = addStats(sum, c.AgentStats(i))
		}
		s.workload[m] = sum
		if s.metrics[m], err = e2e.Scrape(ctx, b.procs[m].metricsURL); err != nil {
			return nil, err
		}
	}
	for _, c := range b.fleet.Clusters() {
		s.capi = addStats(s.capi, c.AgentStats(len(Managers)))
		e := c.EtcdStats()
		s.etcd.Handshakes += e.Handshakes
		s.etcd.Resumed += e.Resumed
		s.etcd.Calls += e.Calls
	}
	return s, nil
}

// measure counts everything over the window.
func (b *bench) measure(ctx context.Context, res *Result) error {
	b.o.Logf("measuring steady state for %s (sync period %s%s)", res.Window, res.SyncPeriod, map[bool]string{true: ", set by flag", false: ", the managers' default"}[res.SyncPeriodFlag])
	res.Load[0] = e2e.LoadAverage()
	before, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	select {
	case <-time.After(res.Window):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	res.Load[1] = e2e.LoadAverage()
	for i, m := range Managers {
		ms := res.Managers[m]
		ms.CPUSeconds = after.cpu[m] - before.cpu[m]
		if ms.RSS, err = e2e.RSS(b.procs[m].Pid()); err != nil {
			return err
		}
		reqs := b.proxies[m].Between(before.at, after.at)
		ms.Management = e2e.SideOf(reqs)
		for _, r := range reqs {
			if r.IsWrite() && r.Resource == "leases" {
				ms.ManagementLeases++
			}
		}
		ms.Workload = subStats(after.workload[m], before.workload[m])
		ms.Reconciles = e2e.Reconciles(after.metrics[m], controllerName[m]) - e2e.Reconciles(before.metrics[m], controllerName[m])
		// The whole run: proxies and fleet against the manager's own client metrics.
		all := b.proxies[m].Between(b.procs[m].started.Add(-time.Second), after.at)
		var wl, wlAll uint64
		for _, c := range b.fleet.Clusters() {
			st := c.AgentStats(i)
			wl += st.Writes
			wlAll += st.Reads + st.Watches + st.Writes + st.Unauthorized
		}
		host := b.proxies[m].Host()
		// Everything the manager's clients sent elsewhere than the management proxy went to its
		// workload clusters.
		notHost := func(h string) bool { return h != host }
		ms.WholeRun = Crosscheck{
			ManagementWrites:       e2e.Writes(all),
			ManagementClientWrites: e2e.ClientWrites(after.metrics[m], host),
			WorkloadWrites:         int(wl),
			WorkloadClientWrites:   e2e.ClientRequests(after.metrics[m], notHost, true),
			WorkloadRequests:       int(wlAll),
			WorkloadClientRequests: e2e.ClientRequests(after.metrics[m], notHost, false),
		}
	}
	res.CAPIWorkload = subStats(after.capi, before.capi)
	res.Etcd = fleet.EtcdStats{Handshakes: after.etcd.Handshakes - before.etcd.Handshakes, Resumed: after.etcd.Resumed - before.etcd.Resumed,
		Calls: after.etcd.Calls - before.etcd.Calls}
	for _, c := range b.fleet.Clusters() {
		res.Unauthorized += c.Stats().Unauthorized
	}
	return nil
}

func addStats(a, b fleet.Stats) fleet.Stats {
	return fleet.Stats{Reads: a.Reads + b.Reads, Probes: a.Probes + b.Probes, Watches: a.Watches + b.Watches, Writes: a.Writes + b.Writes,
		NoOpWrites: a.NoOpWrites + b.NoOpWrites, Unauthorized: a.Unauthorized + b.Unauthorized,
		Protobuf: a.Protobuf + b.Protobuf, Handshakes: a.Handshakes + b.Handshakes}
}

func subStats(a, b fleet.Stats) fleet.Stats {
	return fleet.Stats{Reads: a.Reads - b.Reads, Probes: a.Probes - b.Probes, Watches: a.Watches - b.Watches, Writes: a.Writes - b.Writes,
		NoOpWrites: a.NoOpWrites - b.NoOpWrites, Unauthorized: a.Unauthorized - b.Unauthorized,
		Protobuf: a.Protobuf - b.Protobuf, Handshakes: a.Handshakes - b.Handshakes}
}

// sortedNames returns the sites' names in order.
func (b *bench) sortedNames() []string {
	names := make([]string, 0, len(b.sites))
	for n := range b.sites {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
