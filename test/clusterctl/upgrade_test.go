package clusterctl

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// settle is how long nothing may change after a provider restarted: its first reconciliation
// of every object happens right after its caches sync.
const settle = 8 * time.Second

// TestUpgradeOneProviderAtATime upgrades the bootstrap provider alone from v0.1.0 to v0.2.0
// with clusterctl upgrade apply, then the control-plane provider alone, while both providers
// run and existing Clusters have bootstrap data. Each upgrade replaces exactly its provider's
// components (the other provider's objects keep their UIDs, its manager keeps running), the
// inventory follows, and nothing is rolled out: Machines, KairosConfigs, bootstrap data and
// cluster Secrets stay the same objects with the same contents after the new manager started.
func TestUpgradeOneProviderAtATime(t *testing.T) {
	m := startManagement(t, "management")
	m.init(t, m.initOptions(oldVersion, true))
	m.serveCoreWebhooks(t)
	managers := map[string]*managerProcess{
		bootstrapProvider.Name:    m.startManager(t, bootstrapProvider),
		controlPlaneProvider.Name: m.startManager(t, controlPlaneProvider),
	}
	ns := m.createNamespace(t, "workloads")
	m.buildScenario(t, ns)
	before := m.state(t, ns)
	ctx := framework.Context(t)

	t.Run("plan", func(t *testing.T) {
		plans, err := m.Clusterctl.PlanUpgrade(ctx, clusterctlclient.PlanUpgradeOptions{Kubeconfig: m.Kubeconfig})
		if err != nil {
			t.Fatal(err)
		}
		if len(plans) != 1 || plans[0].Contract != contractVersion {
			t.Fatalf("upgrade plans %+v, want one for contract %s", plans, contractVersion)
		}
		next := map[string]string{}
		for _, item := range plans[0].Providers {
			next[item.InstanceName()] = item.NextVersion
		}
		want := map[string]string{
			bootstrapNamespace + "/" + bootstrapProvider.Label:       newVersion,
			controlPlaneNamespace + "/" + controlPlaneProvider.Label: newVersion,
			coreNamespace + "/cluster-api":                           "",
			simNamespace + "/infrastructure-" + simProviderName:      "",
		}
		for k, v := range want {
			if got, ok := next[k]; !ok || got != v {
				t.Errorf("plan for %s: next version %q (listed: %v), want %q", k, got, ok, v)
			}
		}
	})

	parent := t
	versions := map[string]string{bootstrapProvider.Label: oldVersion, controlPlaneProvider.Label: oldVersion}
	for _, p := range []providerSpec{bootstrapProvider, controlPlaneProvider} {
		other := controlPlaneProvider
		if p == controlPlaneProvider {
			other = bootstrapProvider
		}
		t.Run(p.Name, func(t *testing.T) {
			otherObjects, ownObjects := m.componentUIDs(t, other), m.componentUIDs(t, p)
			crds := m.crdUIDs(t, p)

			// clusterctl scales the Deployment to zero first: the old manager goes away.
			managers[p.Name].stop(t)
			o := clusterctlclient.ApplyUpgradeOptions{Kubeconfig: m.Kubeconfig}
			ref := []string{p.Namespace + "/" + providerName + ":" + newVersion}
			if p.Type == clusterctlv1.BootstrapProviderType {
				o.BootstrapProviders = ref
			} else {
				o.ControlPlaneProviders = ref
			}
			start := time.Now()
			if err := m.Clusterctl.ApplyUpgrade(ctx, o); err != nil {
				t.Fatalf("clusterctl upgrade apply %s: %v", ref[0], err)
			}
			t.Logf("clusterctl upgrade apply %s took %s", ref[0], time.Since(start).Round(100*time.Millisecond))
			versions[p.Label] = newVersion

			inventory := m.providers(t)
			for label, ns := range map[string]string{bootstrapProvider.Label: bootstrapNamespace, controlPlaneProvider.Label: controlPlaneNamespace} {
				if got := inventory[ns+"/"+label].Version; got != versions[label] {
					t.Errorf("inventory: %s is at %q, want %s", label, got, versions[label])
				}
			}
			if got := inventory[coreNamespace+"/cluster-api"].Version; got != m.Repos.CoreVersion {
				t.Errorf("inventory: cluster-api is at %q, want %s", got, m.Repos.CoreVersion)
			}
			checkInstalledProvider(t, m, p, newVersion)
			checkCRDs(t, m, p)
			if now := m.componentUIDs(t, other); !equalUIDs(now, otherObjects) {
				t.Errorf("upgrading %s touched %s's components:\nbefore %v\nafter  %v", p.Label, other.Label, otherObjects, now)
			}
			if now := m.componentUIDs(t, p); equalUIDs(now, ownObjects) || deploymentUID(now) == deploymentUID(ownObjects) {
				t.Errorf("clusterctl upgrade apply did not replace %s's components (Deployment uid %s)", p.Label, deploymentUID(now))
			}
			if now := m.crdUIDs(t, p); !equalUIDs(now, crds) {
				t.Errorf("upgrading %s replaced its CRDs (objects would be lost):\nbefore %v\nafter  %v", p.Label, crds, now)
			}
			managers[other.Name].checkRunning(t)

			// The new Deployment's pod starts; the webhook configurations were recreated
			// by the upgrade and point at it again.
			managers[p.Name] = m.startManagerUntil(t, parent, p)
			framework.Consistently(t, settle, func() error {
				if diffs := compareState(before, m.state(t, ns), true); len(diffs) > 0 {
					return fmt.Errorf("after upgrading %s:\n%s", p.Label, strings.Join(diffs, "\n"))
				}
				return m.configsReady(ns)
			})
			// The webhooks of the new version answer.
			config := &bootstrapv1.KairosConfig{}
			for name := range before.Configs {
				if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, config); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(config.DeepCopy())
				config.Annotations = map[string]string{"test": "after-upgrade-" + p.Name}
				if err := m.Client.Patch(ctx, config, patch); err != nil {
					t.Errorf("updating KairosConfig %s through the webhooks after the upgrade: %v", name, err)
				}
				break
			}
		})
	}
	for _, mp := range managers {
		mp.stop(t)
	}
}

// componentUIDs returns the UIDs of a provider's installed Deployment, ServiceAccounts, webhook
// configurations and RBAC, by kind/name.
func (m *management) componentUIDs(t *testing.T, p providerSpec) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	byLabel := client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}
	out := map[string]types.UID{}
	lists := map[string]client.ObjectList{
		"Deployment":                     &appsv1.DeploymentList{},
		"ServiceAccount":                 &corev1.ServiceAccountList{},
		"Service":                        &corev1.ServiceList{},
		"MutatingWebhookConfiguration":   &admissionv1.MutatingWebhookConfigurationList{},
		"ValidatingWebhookConfiguration": &admissionv1.ValidatingWebhookConfigurationList{},
		"ClusterRole":                    &rbacv1.ClusterRoleList{},
		"ClusterRoleBinding":             &rbacv1.ClusterRoleBindingList{},
		"Role":                           &rbacv1.RoleList{},
		"RoleBinding":                    &rbacv1.RoleBindingList{},
	}
	for kind, l := range lists {
		if err := m.Client.List(ctx, l, byLabel); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(l, func(o runtime.Object) error {
			a, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			out[kind+"/"+a.GetNamespace()+"/"+a.GetName()] = a.GetUID()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < len(lists) {
		t.Fatalf("%s: components missing: %v", p.Label, out)
	}
	return out
}

// crdUIDs returns the UIDs of a provider's CRDs.
func (m *management) crdUIDs(t *testing.T, p providerSpec) map[string]types.UID {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := m.Client.List(context.Background(), list, client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, c := range list.Items {
		out[c.Name] = c.UID
	}
	return out
}

// configsReady checks that every KairosConfig of the namespace reports its data.
func (m *management) configsReady(ns string) error {
	configs := &bootstrapv1.KairosConfigList{}
	if err := m.Client.List(context.Background(), configs, client.InNamespace(ns)); err != nil {
		return err
	}
	for i := range configs.Items {
		c := &configs.Items[i]
		if !conditions.IsTrue(c, bootstrapv1.DataSecretAvailableCondition) || c.Status.DataSecretName == "" {
			return fmt.Errorf("KairosConfig %s does not report its data: %+v", c.Name, c.Status)
		}
	}
	return nil
}

func deploymentUID(uids map[string]types.UID) types.UID {
	for k, v := range uids {
		if strings.HasPrefix(k, "Deployment/") {
			return v
		}
	}
	return ""
}

func equalUIDs(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
