package components

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A second provider, shaped like the control-plane provider will be (its own namespace
// and prefix, only a validating webhook), built against the repository's shared config/.
// It proves the shared pieces carry no bootstrap-specific names.
var otherProvider = map[string]string{
	"cp/config/default/kustomization.yaml": `
namespace: kairos-control-plane-system
namePrefix: kairos-control-plane-
labels:
- includeSelectors: true
  pairs:
    cluster.x-k8s.io/provider: control-plane-kairos
resources:
- namespace.yaml
- ../manager
- ../webhook
components:
- ../../../config/components/certmanager
- ../../../config/components/manager-webhook
transformers:
- ../../../config/transformers/certmanager
`,
	"cp/config/default/namespace.yaml": `
apiVersion: v1
kind: Namespace
metadata:
  name: system
`,
	"cp/config/manager/kustomization.yaml": "resources:\n- manager.yaml\n",
	"cp/config/manager/manager.yaml": `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller-manager
  namespace: system
spec:
  selector:
    matchLabels:
      control-plane: controller-manager
  template:
    metadata:
      labels:
        control-plane: controller-manager
    spec:
      containers:
      - name: manager
        image: example.invalid/manager:dev
`,
	"cp/config/webhook/kustomization.yaml": `
resources:
- manifests.yaml
- service.yaml
configurations:
- kustomizeconfig.yaml
`,
	"cp/config/webhook/kustomizeconfig.yaml": `
nameReference:
- kind: Service
  version: v1
  fieldSpecs:
  - kind: ValidatingWebhookConfiguration
    group: admissionregistration.k8s.io
    path: webhooks/clientConfig/service/name
namespace:
- kind: ValidatingWebhookConfiguration
  group: admissionregistration.k8s.io
  path: webhooks/clientConfig/service/namespace
  create: true
`,
	"cp/config/webhook/service.yaml": `
apiVersion: v1
kind: Service
metadata:
  name: webhook-service
  namespace: system
spec:
  ports:
  - port: 443
    targetPort: webhook-server
`,
	"cp/config/webhook/manifests.yaml": `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: validation.example.controlplane.cluster.x-k8s.io
  admissionReviewVersions: ["v1"]
  sideEffects: None
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-example
`,
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o644)
	}))
}

func TestSharedConfigUnderAnotherProvider(t *testing.T) {
	root, err := RepoRoot("")
	require.NoError(t, err)
	for _, dir := range []string{"components/certmanager", "components/manager-webhook", "transformers/certmanager"} {
		_, err := os.Stat(filepath.Join(root, "config", dir, "kustomization.yaml"))
		require.NoError(t, err, "shared piece config/%s is missing", dir)
	}

	tmp := t.TempDir()
	copyTree(t, filepath.Join(root, "config"), filepath.Join(tmp, "config"))
	for name, content := range otherProvider {
		p := filepath.Join(tmp, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}

	objs, _, err := Build(filepath.Join(tmp, "cp", "config", "default"))
	require.NoError(t, err)

	const ns, prefix = "kairos-control-plane-system", "kairos-control-plane-"
	for _, o := range objs {
		assert.Equal(t, "control-plane-kairos", o.GetLabels()[providerLabel], "%s %s", o.GetKind(), o.GetName())
		if !ClusterScoped[o.GetKind()] {
			assert.Equal(t, ns, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
		}
	}

	cert := certificate(t, objs)
	assert.Equal(t, prefix+"serving-cert", cert.GetName())
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Equal(t, []string{
		prefix + "webhook-service." + ns + ".svc",
		prefix + "webhook-service." + ns + ".svc.cluster.local",
	}, dnsNames)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, prefix+"webhook-service-cert", secretName)
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	assert.Equal(t, prefix+"selfsigned-issuer", issuerName)
	assert.NotNil(t, Find(objs, "Issuer", issuerName))

	d := &appsv1.Deployment{}
	require.NoError(t, Convert(only(t, objs, "Deployment"), d))
	c := d.Spec.Template.Spec.Containers[0]
	require.Len(t, c.Ports, 1)
	assert.Equal(t, int32(9443), c.Ports[0].ContainerPort)
	assert.Equal(t, webhookPortName, c.Ports[0].Name)
	require.Len(t, d.Spec.Template.Spec.Volumes, 1)
	v := d.Spec.Template.Spec.Volumes[0]
	require.NotNil(t, v.Secret)
	assert.Equal(t, secretName, v.Secret.SecretName)
	require.Len(t, c.VolumeMounts, 1)
	assert.Equal(t, webhookCertDir, c.VolumeMounts[0].MountPath)
	assert.Equal(t, v.Name, c.VolumeMounts[0].Name)
	assert.True(t, c.VolumeMounts[0].ReadOnly)

	// No MutatingWebhookConfiguration here: the shared CA injection must not need one.
	assert.Empty(t, OfKind(objs, "MutatingWebhookConfiguration"))
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	require.NoError(t, Convert(only(t, objs, "ValidatingWebhookConfiguration"), vwc))
	assert.Equal(t, ns+"/"+prefix+"serving-cert", vwc.Annotations[injectCAFrom])
	require.Len(t, vwc.Webhooks, 1)
	assert.Equal(t, prefix+"webhook-service", vwc.Webhooks[0].ClientConfig.Service.Name)
	assert.Equal(t, ns, vwc.Webhooks[0].ClientConfig.Service.Namespace)
}
