package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/feature"

	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
)

// TestInPlaceUpdatesRegistersTheExtension starts a harness with InPlaceUpdates and checks, through
// the harness' runtime client (the one Cluster API's reconcilers get), that Cluster API discovered
// the Kairos in-place update extension served by the control-plane provider, that it answers
// CanUpdateMachine for an object of an opted-in namespace, and that it does not apply elsewhere.
func TestInPlaceUpdatesRegistersTheExtension(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := framework.ProjectCRDFiles("controlplane")
	if err != nil {
		t.Fatal(err)
	}
	h := harness.Start(t, harness.Options{
		InPlaceUpdates:   true,
		ExtraCRDFiles:    crds,
		ExtraWebhookDirs: []string{filepath.Join(root, "controlplane", "config", "webhook")},
		AddToScheme:      []func(*runtime.Scheme) error{controlplanesetup.AddToScheme},
		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			if harness.RuntimeClientFrom(ctx) == nil {
				return fmt.Errorf("no runtime client for the providers' Setup")
			}
			return controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{ClusterCache: cc, KairosControlPlaneConcurrency: 1, RuntimeClient: harness.RuntimeClientFrom(ctx)})
		}},
	})
	if !feature.Gates.Enabled(feature.RuntimeSDK) || !feature.Gates.Enabled(feature.InPlaceUpdates) {
		t.Fatal("the RuntimeSDK and InPlaceUpdates feature gates are off")
	}
	ctx := context.Background()
	rc := h.RuntimeClient()
	if rc == nil || !rc.IsReady() {
		t.Fatal("the harness' runtime client is missing or not warmed up")
	}

	// Discovered by Cluster API's ExtensionConfig reconciler, through our client.
	framework.Eventually(t, 30*time.Second, func() error {
		ec := &runtimev1.ExtensionConfig{}
		if err := h.Client.Get(ctx, client.ObjectKey{Name: harness.ExtensionConfigName}, ec); err != nil {
			return err
		}
		var got []string
		for _, hd := range ec.Status.Handlers {
			got = append(got, hd.RequestHook.Hook+"="+hd.Name)
		}
		sort.Strings(got)
		want := []string{
			"CanUpdateMachine=kairos-can-update-machine." + harness.ExtensionConfigName,
			"CanUpdateMachineSet=kairos-can-update-machineset." + harness.ExtensionConfigName,
			"UpdateMachine=kairos-update-machine." + harness.ExtensionConfigName,
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("ExtensionConfig handlers %v, want %v", got, want)
		}
		return nil
	})

	optedIn := framework.NewNamespace(t, h.Client, "inplace-")
	if err := h.OptIntoInPlaceUpdates(ctx, optedIn); err != nil {
		t.Fatal(err)
	}
	classic := framework.NewNamespace(t, h.Client, "classic-")
	machine := func(ns string) *clusterv1.Machine {
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
	}

	// The runtime client reads namespaces from the manager's cache: wait for the label.
	var handlers []string
	framework.Eventually(t, 30*time.Second, func() error {
		var err error
		handlers, err = rc.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, machine(optedIn))
		if err != nil {
			return err
		}
		if len(handlers) != 1 {
			return fmt.Errorf("CanUpdateMachine handlers for the opted-in namespace: %v", handlers)
		}
		return nil
	})
	if handlers[0] != "kairos-can-update-machine."+harness.ExtensionConfigName {
		t.Fatalf("handler %q", handlers[0])
	}

	// The extension's real answer: a new Kairos image with the version it carries is done in place.
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: canUpdateObjects(t, "v1.35.2+k0s", "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k0sv1.35.2+k0s.0"),
		Desired: canUpdateObjects(t, "v1.36.3+k0s", "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k0sv1.36.3+k0s.0"),
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	if err := rc.CallExtension(ctx, runtimehooksv1.CanUpdateMachine, machine(optedIn), handlers[0], req, resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != runtimehooksv1.ResponseStatusSuccess || !strings.HasPrefix(resp.Message, "in place:") || strings.Contains(resp.Message, "not in place") {
		t.Errorf("answer %s: %q", resp.Status, resp.Message)
	}
	if got := string(resp.MachinePatch.Patch); got != `[{"op":"replace","path":"/spec/version","value":"v1.36.3+k0s"}]` {
		t.Errorf("Machine patch %s", got)
	}
	if got := string(resp.BootstrapConfigPatch.Patch); !strings.Contains(got, `"path":"/spec/image"`) || !strings.Contains(got, "k0sv1.36.3") {
		t.Errorf("KairosConfig patch %s", got)
	}

	// A namespace that did not opt in: Cluster API finds no extension, and rolls out.
	if handlers, err := rc.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, machine(classic)); err != nil || len(handlers) != 0 {
		t.Errorf("handlers for a namespace that did not opt in: %v, %v", handlers, err)
	}
	ns := &corev1.Namespace{}
	if err := h.Client.Get(ctx, client.ObjectKey{Name: classic}, ns); err != nil || ns.Labels[harness.InPlaceNamespaceLabel] != "" {
		t.Errorf("namespace %s: %v, labels %v", classic, err, ns.Labels)
	}

	// The gates stay on in the process: a harness that did not ask for in-place updates gets a
	// runtime client that knows no extension (Cluster API's reconcilers require one), and no
	// ExtensionConfig.
	t.Run("another harness without InPlaceUpdates", func(t *testing.T) {
		other := harness.Start(t, harness.Options{})
		orc := other.RuntimeClient()
		if orc == nil || !orc.IsReady() {
			t.Fatal("no warmed-up runtime client while the InPlaceUpdates gate is on")
		}
		ns := framework.NewNamespace(t, other.Client, "other-")
		if handlers, err := orc.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachineSet, machine(ns)); err != nil || len(handlers) != 0 {
			t.Errorf("handlers: %v, %v", handlers, err)
		}
		list := &runtimev1.ExtensionConfigList{}
		if err := other.Client.List(ctx, list); err != nil || len(list.Items) != 0 {
			t.Errorf("ExtensionConfigs: %v, %v", list.Items, err)
		}
	})
}

// canUpdateObjects is a Kairos Machine of a k0s control plane at version, with its KairosConfig on
// image, and a simulated infrastructure machine.
func canUpdateObjects(t *testing.T, version, image string) runtimehooksv1.CanUpdateMachineRequestObjects {
	t.Helper()
	raw := func(v any) runtime.RawExtension {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: data}
	}
	return runtimehooksv1.CanUpdateMachineRequestObjects{
		Machine: clusterv1.Machine{
			TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec:       clusterv1.MachineSpec{ClusterName: "c", Version: version},
		},
		BootstrapConfig: raw(map[string]any{
			"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KairosConfig",
			"metadata": map[string]any{"name": "m"},
			"spec":     map[string]any{"distribution": "k0s", "role": "control-plane", "image": image},
		}),
		InfrastructureMachine: raw(map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KairosSimMachine",
			"metadata": map[string]any{"name": "m"}, "spec": map[string]any{},
		}),
	}
}
