// Package controlplane_test runs the KairosControlPlane and KairosControlPlaneTemplate
// admission webhooks against a real kube-apiserver (envtest) with Cluster API's core CRDs and
// both Kairos providers' CRDs and webhooks, served by one manager that also runs both
// providers' controllers. No test object has an owner Cluster or carries the manager's
// watch-filter label, so the controllers stay idle and every outcome below is the API server's
// and the webhooks'.
//
// Run it alone from the repository root:
//
//	cd test && go test -count=1 ./controlplane/
//	cd test && go test -count=1 -run 'TestInvalidKairosControlPlanes/rollout' -v ./controlplane/
//
// kube-apiserver and etcd come from $KUBEBUILDER_ASSETS, or are built from source once and
// cached by hack/envtest-assets.sh (make envtest-assets). Set KAIROS_TEST_LOG=1 to see the
// manager's logs.
package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	bootstrapmanager "github.com/kairos-capi/kairos-capi/bootstrap/manager"
	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// watchFilter is the manager's --watch-filter. No test object carries it, so neither
// provider's controller reconciles them.
const watchFilter = "kairos-controlplane-webhook-suite"

var (
	scheme = runtime.NewScheme()
	mgmt   *framework.Environment
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for _, add := range []func(*runtime.Scheme) error{bootstrapsetup.AddToScheme, controlplanesetup.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	ctrl.SetLogger(framework.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	webhooks, err := os.MkdirTemp("", "kairos-webhooks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(webhooks) }()

	mgmt, err = startManagement(webhooks)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()

	if err := startManager(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// providers whose CRDs and webhooks the API server gets.
var providers = []string{"bootstrap", "controlplane"}

func startManagement(webhookDir string) (*framework.Environment, error) {
	capi, err := framework.CAPICRDFiles()
	if err != nil {
		return nil, err
	}
	ours, err := framework.ProjectCRDFiles(providers...)
	if err != nil {
		return nil, err
	}
	crds, err := framework.LoadCRDs(append(capi, ours...)...)
	if err != nil {
		return nil, err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	for _, p := range providers {
		if err := writePrefixedWebhooks(filepath.Join(root, p, "config", "webhook", "manifests.yaml"), webhookDir, "kairos-"+p+"-"); err != nil {
			return nil, err
		}
	}
	return framework.Start(framework.Options{CRDs: crds, WebhookDirs: []string{webhookDir}, Scheme: scheme})
}

// writePrefixedWebhooks copies the webhook configurations of a controller-gen manifests file
// into dir with prefix added to their names, as each provider's kustomize namePrefix does.
// Both providers' controller-gen outputs name their configurations
// mutating-webhook-configuration and validating-webhook-configuration; envtest installs
// configurations of one name by updating the first, so installing
// bootstrap/config/webhook and controlplane/config/webhook as they are would leave only the
// control-plane provider's webhooks.
func writePrefixedWebhooks(manifests, dir, prefix string) error {
	data, err := os.ReadFile(manifests)
	if err != nil {
		return fmt.Errorf("%w (run `make generate`)", err)
	}
	var out bytes.Buffer
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	found := 0
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("%s: %w", manifests, err)
		}
		if u.Object == nil {
			continue
		}
		switch u.GetKind() {
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		default:
			continue
		}
		found++
		u.SetName(prefix + u.GetName())
		doc, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		out.WriteString("---\n")
		out.Write(doc)
		out.WriteString("\n")
	}
	if found == 0 {
		return fmt.Errorf("%s holds no webhook configuration", manifests)
	}
	return os.WriteFile(filepath.Join(dir, prefix+"manifests.yaml"), out.Bytes(), 0o600)
}

// startManager runs one manager with both providers' controllers and webhooks, as a process
// running several providers would: one webhook server, one ClusterCache.
func startManager(ctx context.Context) error {
	wh := mgmt.WebhookInstallOptions
	mgr, err := ctrl.NewManager(mgmt.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  bootstrapmanager.CacheOptions("", 10*time.Minute),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	cc, err := bootstrapmanager.NewClusterCache(ctx, mgr, "controlplane-webhook-suite", bootstrapmanager.ClusterCacheOptions{WatchFilter: watchFilter, Concurrency: 1})
	if err != nil {
		return err
	}
	if err := bootstrapsetup.Setup(ctx, mgr, bootstrapsetup.Options{
		ClusterCache: cc, WatchFilter: watchFilter, TokenTTL: 15 * time.Minute, KairosConfigConcurrency: 1,
	}); err != nil {
		return err
	}
	if err := controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{
		ClusterCache: cc, WatchFilter: watchFilter, KairosControlPlaneConcurrency: 1,
	}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	return mgmt.WaitForWebhooks(30 * time.Second)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcp-"}}
	if err := mgmt.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
