// Package runtimesdk_test runs the control-plane manager's runtime SDK wiring
// (controlplane/setup.NewRuntimeClient: a runtime client fed by Cluster API's ExtensionConfig
// reconciler in read-only mode) against a real kube-apiserver, under the ClusterRole the
// control-plane provider ships (controlplane/config/rbac/role.yaml), so that a missing RBAC rule
// fails here rather than in a management cluster.
//
// The tests turn Cluster API's InPlaceUpdates feature gate on and off. The gates are
// process-global (feature.MutableGates), which is why they live in a package of their own: no
// other test of this binary runs a reconciler that reads them, and the tests do not run in
// parallel.
//
//	cd test && go test -count=1 ./runtimesdk/
//
// kube-apiserver and etcd come from $KUBEBUILDER_ASSETS, or are built from source once and
// cached by hack/envtest-assets.sh. Set KAIROS_TEST_LOG=1 to see the manager's logs.
package runtimesdk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/feature"

	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

const (
	// managerUser is the control-plane manager's ServiceAccount as control-plane-components.yaml
	// installs it; the test's manager impersonates it.
	managerUser = "system:serviceaccount:kairos-controlplane-system:kairos-controlplane-manager"
	// watchFilter is the manager's --watch-filter: every ExtensionConfig of the tests carries it,
	// as Cluster API's managers follow only labelled objects once started.
	watchFilter = "kairos-runtimesdk-test"
	// inPlaceLabel selects the namespaces the tests' ExtensionConfigs apply to.
	inPlaceLabel = "test.kairos-capi.io/in-place-updates"
)

var env *framework.Environment

// TestMain starts one API server with Cluster API's ExtensionConfig CRD and the control-plane
// provider's ClusterRole bound to managerUser.
func TestMain(m *testing.M) {
	ctrl.SetLogger(framework.Logger())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	e, err := startEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the API server:", err)
		}
	}()
	env = e
	return m.Run()
}

func startEnv() (*framework.Environment, error) {
	scheme := runtime.NewScheme()
	if err := controlplanesetup.AddToScheme(scheme); err != nil {
		return nil, err
	}
	files, err := framework.CAPICRDFiles()
	if err != nil {
		return nil, err
	}
	files = slices.DeleteFunc(files, func(f string) bool { return !strings.HasSuffix(f, "_extensionconfigs.yaml") })
	if len(files) != 1 {
		return nil, fmt.Errorf("want Cluster API's ExtensionConfig CRD file, found %v", files)
	}
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return nil, err
	}
	e, err := framework.Start(framework.Options{CRDs: crds, Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if err := bindShippedRole(e.Client); err != nil {
		return nil, fmt.Errorf("%w (stopping: %v)", err, e.Stop())
	}
	return e, nil
}

// bindShippedRole creates the ClusterRole controller-gen writes from the control-plane
// provider's RBAC markers and binds it to managerUser.
func bindShippedRole(c client.Client) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "controlplane", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return fmt.Errorf("reading the control plane's ClusterRole: %w", err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, role); err != nil {
		return err
	}
	return c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: managerUser}},
	})
}

// newManager returns a manager configured as the control-plane binary's (common/provider/manager)
// that authenticates as managerUser.
func newManager(t *testing.T) ctrl.Manager {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerUser}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Client.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  manager.CacheOptions("", 10*time.Minute),
		NewCache:               manager.NewCache,
		// Each test (and each -count) builds a manager with the same controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// setInPlaceUpdates sets Cluster API's RuntimeSDK and InPlaceUpdates feature gates (as
// --feature-gates does) until the test ends.
func setInPlaceUpdates(t *testing.T, on bool) {
	t.Helper()
	set := func(on bool) error {
		return feature.MutableGates.SetFromMap(map[string]bool{string(feature.RuntimeSDK): on, string(feature.InPlaceUpdates): on})
	}
	before := feature.Gates.Enabled(feature.InPlaceUpdates)
	if err := set(on); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(before); err != nil {
			t.Error(err)
		}
	})
}

func TestNoRuntimeClientWithTheGateOff(t *testing.T) {
	setInPlaceUpdates(t, false)
	mgr := newManager(t)
	rc, err := controlplanesetup.NewRuntimeClient(context.Background(), mgr, watchFilter)
	if err != nil {
		t.Fatal(err)
	}
	// An untyped nil: the reconciler tests RuntimeClient != nil.
	if rc != nil {
		t.Fatalf("with the InPlaceUpdates gate off NewRuntimeClient returned %T, want nil", rc)
	}
}

// TestRuntimeClientFollowsExtensionConfigs checks that the client NewRuntimeClient builds knows
// the handlers Cluster API core's discovery wrote into ExtensionConfigs' status: those that
// exist at start-up (the warm-up) and those created later, each for the namespaces its
// namespaceSelector selects, and forgets them when they are deleted.
func TestRuntimeClientFollowsExtensionConfigs(t *testing.T) {
	setInPlaceUpdates(t, true)
	ctx := context.Background()
	selected := newNamespace(t, map[string]string{inPlaceLabel: "true"})
	other := newNamespace(t, nil)

	// Registered by the warm-up: it exists before the manager starts.
	before := createDiscovered(t, "kairos-before")

	mgr := newManager(t)
	rc, err := controlplanesetup.NewRuntimeClient(ctx, mgr, watchFilter)
	if err != nil {
		t.Fatal(err)
	}
	if rc == nil {
		t.Fatal("with the InPlaceUpdates gate on NewRuntimeClient returned no client")
	}
	startManager(t, mgr)
	waitFor(t, "the runtime client to be warmed up", rc.IsReady)

	canUpdate := func(ns string) func() ([]string, error) {
		return func() ([]string, error) {
			// Bounded: the Namespace is read from the cache, whose Get waits for the informer
			// to sync, which it never does when the ClusterRole misses namespaces list or watch.
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return rc.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}})
		}
	}
	expectHandlers(t, canUpdate(selected), "can-update-machine.kairos-before")
	expectHandlers(t, canUpdate(other))

	if err := env.Client.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	expectHandlers(t, canUpdate(selected))

	// Registered by the reconciler: created (and discovered) while the manager runs.
	after := createDiscovered(t, "kairos-after")
	expectHandlers(t, canUpdate(selected), "can-update-machine.kairos-after")
	expectHandlers(t, canUpdate(other))

	// Read-only: registering it did not write it (core owns its status and CA bundle).
	got := &runtimev1.ExtensionConfig{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(after), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != after.ResourceVersion {
		t.Errorf("ExtensionConfig %s was written after its status was: resourceVersion %s, want %s", after.Name, got.ResourceVersion, after.ResourceVersion)
	}

	if err := env.Client.Delete(ctx, after); err != nil {
		t.Fatal(err)
	}
	expectHandlers(t, canUpdate(selected))
}

func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "runtimesdk-", Labels: labels}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createDiscovered creates an ExtensionConfig for the namespaces labelled inPlaceLabel, then
// writes its status as Cluster API core's discovery would have: the Discovered condition for its
// generation, and the extension's handlers named <handler>.<ExtensionConfig>. Its url is never
// called.
func createDiscovered(t *testing.T, name string) *runtimev1.ExtensionConfig {
	t.Helper()
	ctx := context.Background()
	ec := &runtimev1.ExtensionConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
		Spec: runtimev1.ExtensionConfigSpec{
			ClientConfig: runtimev1.ClientConfig{
				URL: "https://127.0.0.1:1",
				// The read-only reconciler only checks that core injected one.
				CABundle: []byte("a CA bundle"),
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{inPlaceLabel: "true"}},
		},
	}
	if err := env.Client.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(env.Client.Delete(context.Background(), ec)) })
	hook := func(handler, hook string) runtimev1.ExtensionHandler {
		return runtimev1.ExtensionHandler{
			Name:           handler + "." + name,
			RequestHook:    runtimev1.GroupVersionHook{APIVersion: runtimehooksv1.GroupVersion.String(), Hook: hook},
			TimeoutSeconds: 10,
			FailurePolicy:  runtimev1.FailurePolicyFail,
		}
	}
	ec.Status = runtimev1.ExtensionConfigStatus{
		Conditions: []metav1.Condition{{
			Type: runtimev1.ExtensionConfigDiscoveredCondition, Status: metav1.ConditionTrue, Reason: runtimev1.ExtensionConfigDiscoveredReason,
			ObservedGeneration: ec.Generation, LastTransitionTime: metav1.Now(),
		}},
		Handlers: []runtimev1.ExtensionHandler{
			hook("can-update-machine", "CanUpdateMachine"),
			hook("update-machine", "UpdateMachine"),
		},
	}
	// The status subresource: a plain update would drop it.
	if err := env.Client.Status().Update(ctx, ec); err != nil {
		t.Fatal(err)
	}
	return ec
}

func startManager(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

const timeout = 30 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectHandlers waits until list returns exactly want (in any order).
func expectHandlers(t *testing.T, list func() ([]string, error), want ...string) {
	t.Helper()
	var got []string
	var err error
	deadline := time.Now().Add(timeout)
	for {
		got, err = list()
		if err == nil && len(got) == len(want) && !slices.ContainsFunc(got, func(h string) bool { return !slices.Contains(want, h) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runtime client lists CanUpdateMachine handlers %v (error: %v), want %v", got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
