package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestOlderBootstrapCRD runs the control plane (release v0.2.0) against an API server whose
// KairosConfig CRD is older than the control plane: the CRD a bootstrap provider release v0.1.0
// installed before spec.virtualIP existed (commit 5f6ab87 added it; here it is the current CRD
// without that field). The bootstrap provider's webhooks of this tree default KairosConfigs.
//
//   - A control plane whose spec uses virtualIP creates nothing at all: the API server refuses
//     the KairosConfig under strict field validation, and BootstrapProviderCompatible says which
//     field and what to do. Before, the field was pruned without a word, the KairosConfig never
//     matched and every Machine was replaced again and again.
//   - A control plane that uses no new field creates its Machine; the defaults the bootstrap
//     webhook adds are not the control plane's (managedFields say so) and the Machine is up to
//     date.
//   - A bootstrap provider outside the version-skew policy (v0.5.0) stops the next Machine with
//     a condition naming the policy.
func TestOlderBootstrapCRD(t *testing.T) {
	ctx := framework.Context(t)
	env := startOlderBootstrapCRDEnv(t)
	c := env.Client
	ns := framework.NewNamespace(t, c, "skew-")

	refused := newSkewCluster(t, c, ns, "uses-vip", func(s *bootstrapv1.KairosConfigSpec) {
		s.VirtualIP = &bootstrapv1.VirtualIP{Address: skewEndpoint}
	})
	accepted := newSkewCluster(t, c, ns, "plain", nil)

	t.Run("a field the CRD does not know is refused and nothing is created", func(t *testing.T) {
		cond := waitCondition(t, c, refused, controlplanev1.KairosConfigRefusedReason)
		for _, want := range []string{`unknown field "spec.virtualIP"`, "bootstrap provider v0.1.0 refused the KairosConfig of a new Machine",
			"remove what it does not accept from spec.kairosConfigSpec", "or upgrade the bootstrap provider"} {
			if !strings.Contains(cond.Message, want) {
				t.Errorf("condition message %q does not say %q", cond.Message, want)
			}
		}
		// Not once, not in a loop: no KairosConfig, infrastructure machine or Machine exists,
		// and the control plane still waits a while later.
		framework.Consistently(t, 5*time.Second, func() error {
			return noObjectsOf(ctx, c, ns, "uses-vip")
		})
	})

	t.Run("defaults of the bootstrap provider are not the control plane's", func(t *testing.T) {
		var m clusterv1.Machine
		framework.Eventually(t, 30*time.Second, func() error {
			machines := &clusterv1.MachineList{}
			if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "plain"}); err != nil {
				return err
			}
			if len(machines.Items) != 1 {
				return fmt.Errorf("%d Machines, want 1", len(machines.Items))
			}
			m = machines.Items[0]
			if !conditions.IsTrue(&m, clusterv1.MachineUpToDateCondition) {
				return fmt.Errorf("Machine %s not up to date: %+v", m.Name, conditions.Get(&m, clusterv1.MachineUpToDateCondition))
			}
			return nil
		})
		config := &unstructured.Unstructured{}
		config.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KairosConfig"))
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Spec.Bootstrap.ConfigRef.Name}, config); err != nil {
			t.Fatal(err)
		}
		// The webhook defaulted the user name; the control plane's managedFields entry does
		// not list it, and does list what it asked for.
		if name, _, _ := unstructured.NestedString(config.Object, "spec", "userName"); name != bootstrapv1.DefaultUserName {
			t.Errorf("spec.userName = %q: not defaulted by the bootstrap webhook", name)
		}
		var owned string
		for _, mf := range config.GetManagedFields() {
			if mf.Manager == "kairos-controlplane" {
				owned = string(mf.FieldsV1.Raw)
			}
		}
		if !strings.Contains(owned, `"f:role"`) || !strings.Contains(owned, `"f:userPassword"`) || strings.Contains(owned, `"f:userName"`) {
			t.Errorf("fields recorded for the control plane: %s; want role and userPassword, not the webhook's userName", owned)
		}
		waitCondition(t, c, accepted, controlplanev1.BootstrapProviderCompatibleReason)
	})

	t.Run("a bootstrap provider outside the policy stops new Machines", func(t *testing.T) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: "kairosconfigs.bootstrap.cluster.x-k8s.io"}, crd); err != nil {
			t.Fatal(err)
		}
		crd.Annotations[bootstrapv1.ReleaseAnnotation] = "v0.5.0"
		if err := c.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
		// Scale up; the control plane reconciles the change of its spec at once.
		kcp := &controlplanev1.KairosControlPlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(accepted), kcp); err != nil {
			t.Fatal(err)
		}
		kcp.Spec.Replicas = ptr.To[int32](3)
		if err := c.Update(ctx, kcp); err != nil {
			t.Fatal(err)
		}
		cond := waitCondition(t, c, accepted, controlplanev1.BootstrapProviderNotCompatibleReason)
		if want := "bootstrap provider v0.5.0 is outside the version-skew policy of control-plane provider v0.2.0, which works with bootstrap v0.1.x to v0.3.x: upgrade the control-plane provider"; !strings.Contains(cond.Message, want) {
			t.Errorf("condition message %q, want %q", cond.Message, want)
		}
		framework.Consistently(t, 3*time.Second, func() error {
			machines := &clusterv1.MachineList{}
			if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "plain"}); err != nil {
				return err
			}
			if len(machines.Items) != 1 {
				return fmt.Errorf("%d Machines outside the policy, want 1", len(machines.Items))
			}
			return nil
		})
	})
}

// skewEndpoint is the control-plane endpoint of the test's Clusters (and the virtual IP).
const skewEndpoint = "192.0.2.10"

// startOlderBootstrapCRDEnv starts an API server with Cluster API's CRDs, the control plane's,
// the simulation infrastructure's and the older KairosConfig CRD (stamped as bootstrap release
// v0.1.0), both providers' webhooks, and a manager running the control plane's controller
// (release v0.2.0) and the bootstrap provider's webhooks only.
func startOlderBootstrapCRDEnv(t *testing.T) *framework.Suite {
	t.Helper()
	infra, err := infrastructure.CRDFiles()
	if err != nil {
		t.Fatal(err)
	}
	env, err := framework.StartSuite(framework.SuiteOptions{
		Providers:     providers,
		ExtraCRDFiles: infra,
		EditCRDs:      withoutVirtualIP,
		AddToScheme:   []func(*runtime.Scheme) error{bootstrapsetup.AddToScheme, controlplanesetup.AddToScheme, infrav1.AddToScheme, apiextensionsv1.AddToScheme},
		Name:          "skew-test",
		ClusterCache:  manager.ClusterCacheOptions{Concurrency: 1},
		// The suite's manager runs the same controllers in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Setup: []framework.SetupFunc{
			// The bootstrap provider's webhooks default and validate KairosConfigs; its
			// controller stays idle behind a watch filter no object carries.
			func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
				return bootstrapsetup.Setup(ctx, mgr, bootstrapsetup.Options{ClusterCache: cc, WatchFilter: "none", KairosConfigConcurrency: 1})
			},
			func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
				return controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{ClusterCache: cc, KairosControlPlaneConcurrency: 1, Version: "v0.2.0"})
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// withoutVirtualIP turns the KairosConfig CRD into the one bootstrap release v0.1.0 installed:
// no spec.virtualIP (nor the CEL rules about it), and the release annotation v0.1.0.
func withoutVirtualIP(crds []*apiextensionsv1.CustomResourceDefinition) error {
	found := false
	for _, crd := range crds {
		if crd.Name != "kairosconfigs.bootstrap.cluster.x-k8s.io" {
			continue
		}
		found = true
		metav1.SetMetaDataAnnotation(&crd.ObjectMeta, bootstrapv1.ReleaseAnnotation, "v0.1.0")
		for i := range crd.Spec.Versions {
			root := crd.Spec.Versions[i].Schema.OpenAPIV3Schema
			spec := root.Properties["spec"]
			if _, ok := spec.Properties["virtualIP"]; !ok {
				return errors.New("the KairosConfig CRD has no spec.virtualIP to remove")
			}
			delete(spec.Properties, "virtualIP")
			// Nor had it the CEL rules about the field (an API server refuses a rule naming a
			// field the schema does not have), wherever they are: the rules that depend on the
			// role are on the object, the others on spec.
			aboutVIP := func(r apiextensionsv1.ValidationRule) bool { return strings.Contains(r.Rule, "virtualIP") }
			spec.XValidations = slices.DeleteFunc(spec.XValidations, aboutVIP)
			root.XValidations = slices.DeleteFunc(root.XValidations, aboutVIP)
			root.Properties["spec"] = spec
		}
	}
	if !found {
		return errors.New("no KairosConfig CRD")
	}
	return nil
}

// newSkewCluster creates a Cluster with provisioned infrastructure and an endpoint (no Cluster
// API controller runs), and its one-replica KairosControlPlane on simulated infrastructure.
func newSkewCluster(t *testing.T, c client.Client, ns, name string, mutate func(*bootstrapv1.KairosConfigSpec)) *controlplanev1.KairosControlPlane {
	t.Helper()
	ctx := framework.Context(t)
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: skewEndpoint, Port: 6443},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: name},
		},
	}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := c.Status().Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	tmpl := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-cp"}}
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	kcp := &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: cluster.UID}}},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas: ptr.To[int32](1),
			Version:  "v1.31.2+k0s",
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: tmpl.Name},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "not-the-default"},
		},
	}
	if mutate != nil {
		mutate(&kcp.Spec.KairosConfigSpec)
	}
	if err := c.Create(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	return kcp
}

// waitCondition waits until the control plane's BootstrapProviderCompatible condition has reason.
func waitCondition(t *testing.T, c client.Client, kcp *controlplanev1.KairosControlPlane, reason string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	framework.Eventually(t, 45*time.Second, func() error {
		got := &controlplanev1.KairosControlPlane{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(kcp), got); err != nil {
			return err
		}
		cc := conditions.Get(got, controlplanev1.BootstrapProviderCompatibleCondition)
		if cc == nil || cc.Reason != reason {
			return fmt.Errorf("condition %s = %+v, want reason %s", controlplanev1.BootstrapProviderCompatibleCondition, cc, reason)
		}
		cond = *cc
		return nil
	})
	return cond
}

// noObjectsOf fails when a KairosConfig, infrastructure machine or Machine of the cluster exists.
func noObjectsOf(ctx context.Context, c client.Client, ns, cluster string) error {
	var errs []error
	for kind, l := range map[string]client.ObjectList{
		"KairosConfig": &bootstrapv1.KairosConfigList{}, "KairosSimMachine": &infrav1.KairosSimMachineList{}, "Machine": &clusterv1.MachineList{},
	} {
		if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return err
		}
		if n := meta.LenList(l); n > 0 {
			errs = append(errs, fmt.Errorf("%d %s objects exist", n, kind))
		}
	}
	return errors.Join(errs...)
}
