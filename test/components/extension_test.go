package components

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The Kairos in-place update extension's registration (controlplane/config/extension) points at
// what control-plane-components.yaml installs: the manager's webhook Service (the manager serves
// the runtime hooks on its webhook server) and the Secret of its cert-manager Certificate (Cluster
// API injects the CA from it). And control-plane-components.yaml itself carries no ExtensionConfig:
// Cluster API's webhook refuses ExtensionConfigs while the RuntimeSDK gate is off (its default),
// which would make every `clusterctl init` without that gate fail.
func TestInPlaceExtensionConfig(t *testing.T) {
	p := controlPlaneProvider
	b := p.components(t)
	assert.Empty(t, OfKind(b.objs, "ExtensionConfig"), "control-plane-components.yaml must not carry an ExtensionConfig")

	objs, _, err := Build(filepath.Join(b.root, "controlplane", "config", "extension"))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	ec := objs[0]
	assert.Equal(t, "runtime.cluster.x-k8s.io/v1beta2", ec.GetAPIVersion())
	assert.Equal(t, "ExtensionConfig", ec.GetKind())
	assert.Empty(t, ec.GetNamespace(), "ExtensionConfig is cluster-scoped")
	assert.Equal(t, p.label, ec.GetLabels()[providerLabel])

	svc := only(t, b.objs, "Service")
	name, _, _ := unstructured.NestedString(ec.Object, "spec", "clientConfig", "service", "name")
	ns, _, _ := unstructured.NestedString(ec.Object, "spec", "clientConfig", "service", "namespace")
	path, _, _ := unstructured.NestedString(ec.Object, "spec", "clientConfig", "service", "path")
	port, _, _ := unstructured.NestedFieldNoCopy(ec.Object, "spec", "clientConfig", "service", "port")
	assert.Equal(t, svc.GetName(), name)
	assert.Equal(t, p.namespace, svc.GetNamespace())
	assert.Equal(t, svc.GetNamespace(), ns)
	assert.Empty(t, path, "the runtime SDK paths are served at the root of the webhook server")
	service := &corev1.Service{}
	require.NoError(t, Convert(svc, service))
	require.Len(t, service.Spec.Ports, 1)
	assert.Equal(t, fmt.Sprint(service.Spec.Ports[0].Port), fmt.Sprint(port))

	cert := certificate(t, b.objs)
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, cert.GetNamespace()+"/"+secret, ec.GetAnnotations()["runtime.cluster.x-k8s.io/inject-ca-from-secret"])
	_, certManager := ec.GetAnnotations()[injectCAFrom]
	assert.False(t, certManager, "cert-manager's CA injector does not handle ExtensionConfigs")
}

// The control-plane manager only reads ExtensionConfigs (controlplane/setup.NewRuntimeClient runs
// Cluster API's ExtensionConfig reconciler read-only): Cluster API core discovers them and injects
// their CA, and a second writer would fight it over their status.
func TestControlPlaneReadsExtensionConfigsOnly(t *testing.T) {
	p := controlPlaneProvider
	b := p.components(t)
	d, _ := managerDeployment(t, b.objs)
	cluster, namespaced := rulesBoundTo(t, b.objs, d.Spec.Template.Spec.ServiceAccountName, p.namespace)
	for _, res := range []string{"extensionconfigs", "extensionconfigs/status"} {
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			assert.False(t, allows(cluster, "runtime.cluster.x-k8s.io", res, verb), "the manager may %s %s", verb, res)
			assert.False(t, allows(namespaced, "runtime.cluster.x-k8s.io", res, verb), "the manager may %s %s", verb, res)
		}
	}
}
