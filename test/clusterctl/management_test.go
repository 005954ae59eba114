package clusterctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// defaultParallel is how many of the parallel tests (the mixed-version orders and the two kill
// tests, each with a management cluster of its own) run at once unless -test.parallel says
// otherwise: go test's default of one per core left the machine half idle while they wait for
// their managers and API servers. TestInit, TestMove and TestInstalledProvidersRun run before
// them, one at a time: with them in the pool too (seven tests, three at a time) a cold run's
// TestMixedVersions/bootstrap_first saw a control-plane Machine stay without a Node for 4
// minutes beside the rest of the test module (2026-11-28). With less CPU than 2 cores, fewer,
// in proportion (framework.ScaledToCPUs).
const defaultParallel = 3

// slots runs the parallel tests longest first (framework.Scheduler). Seconds are their
// durations, measured with hack/test-times.sh beside the rest of the test module.
var slots = &framework.Scheduler{Seconds: map[string]int{
	"TestMixedVersions/bootstrap_first":                300,
	"TestMixedVersions/controlplane_first":             200,
	"TestControlPlaneManagerKilledDuringScaleUp":       185,
	"TestControlPlaneManagerKilledDuringInPlaceUpdate": 120,
}}

func TestMain(m *testing.M) {
	flag.Parse()
	if err := slots.TakeParallelFlag(framework.ScaledToCPUs(defaultParallel)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l := framework.Logger()
	ctrl.SetLogger(l)
	klog.SetLogger(l)
	clusterctllog.SetLogger(l)
	// TestControlPlaneManagerKilledDuringInPlaceUpdate runs Cluster API with its in-place
	// update gates, which are process-global: on before any harness starts, so that every harness
	// runs with a runtime client (harness.EnableInPlaceGates). The others register no extension,
	// so their rollouts stay classic.
	if err := harness.EnableInPlaceGates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, dir := range []string{reposDir, binDir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// scheme knows every API the tests read.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, clusterctlv1.AddToScheme,
		// v1beta1 for the conversions Cluster API's webhooks register.
		clusterv1beta1.AddToScheme,
		bootstrapv1.AddToScheme, controlplanev1.AddToScheme, infrav1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// providerSpec is one of our two providers as the tests know it.
type providerSpec struct {
	// Name is the folder of its main package and the name of its binary and logs.
	Name string
	// Label is its clusterctl label (the value of cluster.x-k8s.io/provider).
	Label string
	// Namespace is where its components go.
	Namespace string
	// Type is its clusterctl provider type.
	Type clusterctlv1.ProviderType
}

var (
	bootstrapProvider    = providerSpec{Name: "bootstrap", Label: repo.Bootstrap.Label, Namespace: bootstrapNamespace, Type: clusterctlv1.BootstrapProviderType}
	controlPlaneProvider = providerSpec{Name: "controlplane", Label: repo.ControlPlane.Label, Namespace: controlPlaneNamespace, Type: clusterctlv1.ControlPlaneProviderType}
)

// management is one management cluster: an API server with the cert-manager CRDs, an admin
// client and kubeconfig, and a clusterctl client reading the test repositories.
type management struct {
	Name       string
	Env        *framework.Environment
	Client     client.Client
	Kubeconfig clusterctlclient.Kubeconfig
	Clusterctl clusterctlclient.Client
	Repos      *clusterctlrepo.Repositories

	// dir holds this cluster's kubeconfigs, serving certificate and manager logs.
	dir string
	// certDir holds the serving certificate of every local webhook server (127.0.0.1) and
	// caBundle its CA.
	certDir  string
	caBundle []byte
}

// startManagement starts an API server for the test and stops it when the test ends.
func startManagement(t *testing.T, name string) *management {
	t.Helper()
	start := time.Now()
	repos, err := getRepositories()
	if err != nil {
		t.Fatal(err)
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, len(repos.CertManagerCRDs))
	for i, c := range repos.CertManagerCRDs {
		crds[i] = c.DeepCopy()
	}
	env, err := framework.Start(framework.Options{CRDs: crds, Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping API server %s: %v", name, err)
		}
	})
	m := &management{Name: name, Env: env, Client: env.Client, Repos: repos, dir: filepath.Join(t.TempDir(), name)}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	admin, err := env.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	m.Kubeconfig.Path = filepath.Join(m.dir, "admin.kubeconfig")
	if err := os.WriteFile(m.Kubeconfig.Path, admin, 0o600); err != nil {
		t.Fatal(err)
	}
	if m.Clusterctl, err = clusterctlclient.New(context.Background(), repos.ConfigFile); err != nil {
		t.Fatal(err)
	}
	m.certDir = filepath.Join(m.dir, "serving-certs")
	if m.caBundle, err = framework.WriteServingCertificate(m.certDir, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: API server started in %s", name, time.Since(start).Round(100*time.Millisecond))
	return m
}

// initOptions returns clusterctl init options for the core provider, both Kairos providers at
// version and, with sim, the simulation infrastructure provider.
func (m *management) initOptions(version string, sim bool) clusterctlclient.InitOptions {
	o := clusterctlclient.InitOptions{
		Kubeconfig:            m.Kubeconfig,
		CoreProvider:          "cluster-api:" + m.Repos.CoreVersion,
		BootstrapProviders:    []string{providerName + ":" + version},
		ControlPlaneProviders: []string{providerName + ":" + version},
		// No kubelet runs the Deployments' pods.
		WaitProviders: false,
	}
	if sim {
		o.InfrastructureProviders = []string{simProviderName + ":" + simVersion}
	}
	return o
}

// init runs clusterctl init with the given options.
func (m *management) init(t *testing.T, o clusterctlclient.InitOptions) []clusterctlclient.Components {
	t.Helper()
	start := time.Now()
	components, err := m.Clusterctl.Init(framework.Context(t), o)
	if err != nil {
		t.Fatalf("%s: clusterctl init: %v", m.Name, err)
	}
	t.Logf("%s: clusterctl init took %s", m.Name, time.Since(start).Round(100*time.Millisecond))
	return components
}

// providers returns the clusterctl inventory by InstanceName (namespace/label).
func (m *management) providers(t *testing.T) map[string]clusterctlv1.Provider {
	t.Helper()
	list := &clusterctlv1.ProviderList{}
	if err := m.Client.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	out := map[string]clusterctlv1.Provider{}
	for _, p := range list.Items {
		out[p.Namespace+"/"+p.Name] = p
	}
	return out
}
