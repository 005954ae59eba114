package components

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// objectKey identifies an object on a cluster: cluster-scoped objects by group, kind and
// name, namespaced ones also by namespace.
func objectKey(o *unstructured.Unstructured, namespace string) string {
	return o.GroupVersionKind().GroupKind().String() + " " + namespace + "/" + o.GetName()
}

// TestProvidersInstallSideBySide: `clusterctl init --bootstrap kairos --control-plane kairos`
// applies both components YAMLs to one cluster; no object of one may overwrite an object of
// the other.
func TestProvidersInstallSideBySide(t *testing.T) {
	bs, cp := bootstrapProvider.components(t), controlPlaneProvider.components(t)

	t.Run("own namespaces", func(t *testing.T) {
		seen := map[string]string{}
		for name, b := range map[string]built{"bootstrap": bs, "control plane": cp} {
			for _, o := range b.objs {
				key := objectKey(o, o.GetNamespace())
				if other, ok := seen[key]; ok {
					t.Errorf("%s is shipped by both the %s and the %s provider", key, other, name)
				}
				seen[key] = name
			}
		}
		assert.NotEqual(t, only(t, bs.objs, "Namespace").GetName(), only(t, cp.objs, "Namespace").GetName())
	})

	// clusterctl init --target-namespace may put both providers into one namespace: even then
	// the namespaced objects (Deployments, Services, Secrets of the Certificates, leader
	// election Roles...) must not collide.
	t.Run("one target namespace", func(t *testing.T) {
		seen := map[string]string{}
		for name, b := range map[string]built{"bootstrap": bs, "control plane": cp} {
			for _, o := range b.objs {
				ns := "target"
				if ClusterScoped[o.GetKind()] {
					ns = ""
				}
				if o.GetKind() == "Namespace" {
					continue // clusterctl replaces both with the target namespace
				}
				key := objectKey(o, ns)
				if other, ok := seen[key]; ok {
					t.Errorf("%s is shipped by both the %s and the %s provider", key, other, name)
				}
				seen[key] = name
			}
		}
		// The Certificates write distinct Secrets.
		secret := func(b built) string {
			s, _, _ := unstructured.NestedString(certificate(t, b.objs).Object, "spec", "secretName")
			return s
		}
		assert.NotEqual(t, secret(bs), secret(cp), "both Certificates write one Secret")

		// Each webhook Service selects only its own provider's Pods.
		for _, pair := range []struct{ svc, other built }{{bs, cp}, {cp, bs}} {
			svc := &corev1.Service{}
			require.NoError(t, Convert(only(t, pair.svc.objs, "Service"), svc))
			d, _ := managerDeployment(t, pair.other.objs)
			matches := true
			for k, v := range svc.Spec.Selector {
				matches = matches && d.Spec.Template.Labels[k] == v
			}
			assert.False(t, matches, "Service %s selects the Pods of Deployment %s", svc.Name, d.Name)
		}

		// Leader election Leases live in the manager's namespace under the manager's
		// LeaderElectionID: one namespace means the IDs must differ.
		root := bs.root
		id := func(provider string) string {
			data, err := os.ReadFile(filepath.Join(root, provider, "main.go"))
			require.NoError(t, err)
			m := regexp.MustCompile(`LeaderElectionID:\s*"([^"]+)"`).FindSubmatch(data)
			require.NotNil(t, m, "no LeaderElectionID in %s/main.go", provider)
			return string(m[1])
		}
		assert.NotEqual(t, id("bootstrap"), id("controlplane"), "both managers elect a leader through one Lease")
	})

	t.Run("distinct webhook paths and names", func(t *testing.T) {
		names := map[string]bool{}
		for _, b := range []built{bs, cp} {
			for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
				for _, o := range OfKind(b.objs, kind) {
					webhooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
					for _, w := range webhooks {
						name, _, _ := unstructured.NestedString(w.(map[string]any), "name")
						assert.False(t, names[kind+"/"+name], "webhook %s is configured by both providers", name)
						names[kind+"/"+name] = true
					}
				}
			}
		}
	})
}
