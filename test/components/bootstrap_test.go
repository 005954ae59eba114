package components

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/util/contract"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

const (
	bsNamespace     = "kairos-bootstrap-system"
	bsPrefix        = "kairos-bootstrap-"
	providerLabel   = "cluster.x-k8s.io/provider"
	bsProvider      = "bootstrap-kairos"
	contractLabel   = "cluster.x-k8s.io/v1beta2"
	injectCAFrom    = "cert-manager.io/inject-ca-from"
	webhookCertDir  = "/tmp/k8s-webhook-server/serving-certs"
	managerImage    = "ghcr.io/kairos-capi/kairos-bootstrap-manager:dev"
	restrictedUser  = int64(65532)
	webhookPortName = "webhook-server"
)

// The files controller-gen writes (make generate). The build needs them; their absence
// must fail the tests, not skip them.
var generatedFiles = []string{
	"bootstrap/config/crd/bases/bootstrap.cluster.x-k8s.io_kairosconfigs.yaml",
	"bootstrap/config/crd/bases/bootstrap.cluster.x-k8s.io_kairosconfigtemplates.yaml",
	"bootstrap/config/rbac/role.yaml",
	"bootstrap/config/webhook/manifests.yaml",
}

type built struct {
	root string
	objs []*unstructured.Unstructured
	yaml []byte
	err  error
}

var (
	bootstrapOnce  sync.Once
	bootstrapBuild built
)

// bootstrapComponents builds bootstrap/config/default once per test binary.
func bootstrapComponents(t *testing.T) built {
	t.Helper()
	bootstrapOnce.Do(func() {
		root, err := RepoRoot("")
		if err != nil {
			bootstrapBuild.err = err
			return
		}
		bootstrapBuild.root = root
		bootstrapBuild.objs, bootstrapBuild.yaml, bootstrapBuild.err = Build(filepath.Join(root, "bootstrap", "config", "default"))
	})
	require.NoError(t, bootstrapBuild.err)
	require.NotEmpty(t, bootstrapBuild.objs)
	return bootstrapBuild
}

// only returns the single object of a kind, failing otherwise.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := OfKind(objs, kind)
	require.Len(t, found, 1, "want exactly one %s", kind)
	return found[0]
}

func managerDeployment(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := &appsv1.Deployment{}
	require.NoError(t, Convert(only(t, objs, "Deployment"), d))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	return d, &d.Spec.Template.Spec.Containers[0]
}

func TestGeneratedFilesExist(t *testing.T) {
	root, err := RepoRoot("")
	require.NoError(t, err)
	for _, f := range generatedFiles {
		info, err := os.Stat(filepath.Join(root, f))
		if assert.NoError(t, err, "%s is missing: run `make generate`", f) {
			assert.NotZero(t, info.Size(), "%s is empty", f)
		}
	}
}

func TestBootstrapBuilds(t *testing.T) {
	b := bootstrapComponents(t)
	var ids []string
	for _, o := range b.objs {
		ids = append(ids, o.GetKind()+"/"+o.GetName()+"/"+o.GetNamespace())
	}
	t.Logf("rendered objects:\n%s", strings.Join(ids, "\n"))
}

func TestBootstrapSingleNamespace(t *testing.T) {
	b := bootstrapComponents(t)
	ns := only(t, b.objs, "Namespace")
	assert.Equal(t, bsNamespace, ns.GetName())
}

func TestBootstrapProviderLabelOnEveryObject(t *testing.T) {
	b := bootstrapComponents(t)
	for _, o := range b.objs {
		assert.Equal(t, bsProvider, o.GetLabels()[providerLabel], "%s %s", o.GetKind(), o.GetName())
	}
	// includeSelectors: the Deployment's Pods and the webhook Service select this provider only.
	d, _ := managerDeployment(t, b.objs)
	assert.Equal(t, bsProvider, d.Spec.Selector.MatchLabels[providerLabel])
	assert.Equal(t, bsProvider, d.Spec.Template.Labels[providerLabel])
	svc := &corev1.Service{}
	require.NoError(t, Convert(only(t, b.objs, "Service"), svc))
	assert.Equal(t, bsProvider, svc.Spec.Selector[providerLabel])
	for k, v := range svc.Spec.Selector {
		assert.Equal(t, v, d.Spec.Template.Labels[k], "Service selector %s must match the manager Pods", k)
	}
}

func TestBootstrapNamespaces(t *testing.T) {
	b := bootstrapComponents(t)
	for _, o := range b.objs {
		if ClusterScoped[o.GetKind()] {
			assert.Empty(t, o.GetNamespace(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
			continue
		}
		assert.Equal(t, bsNamespace, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
	}
}

func TestBootstrapNamePrefix(t *testing.T) {
	b := bootstrapComponents(t)
	for _, o := range b.objs {
		if o.GetKind() == "CustomResourceDefinition" {
			continue // CRD names are <plural>.<group>
		}
		assert.True(t, strings.HasPrefix(o.GetName(), bsPrefix), "%s %s lacks the %s prefix", o.GetKind(), o.GetName(), bsPrefix)
	}
}

func TestBootstrapVariablesHaveDefaults(t *testing.T) {
	b := bootstrapComponents(t)
	// clusterctl substitutes ${...} anywhere in the file; every variable must have a default
	// so that `clusterctl init --bootstrap kairos` works with no variable set.
	for _, m := range regexp.MustCompile(`\$\{([^}]*)\}`).FindAllStringSubmatch(string(b.yaml), -1) {
		assert.Regexp(t, `^[A-Z][A-Z0-9_]*:=.+$`, m[1], "variable %s has no default", m[0])
	}
}

func TestBootstrapManagerDeployment(t *testing.T) {
	b := bootstrapComponents(t)
	d, c := managerDeployment(t, b.objs)
	pod := d.Spec.Template.Spec

	assert.Equal(t, bsPrefix+"controller-manager", d.Name)
	assert.Equal(t, "manager", c.Name, "clusterctl requires the container to be named manager")
	assert.Equal(t, managerImage, c.Image)

	for _, arg := range []string{
		"--leader-elect",
		"--diagnostics-address=${KAIROS_BOOTSTRAP_DIAGNOSTICS_ADDRESS:=:8443}",
		"--insecure-diagnostics=${KAIROS_BOOTSTRAP_INSECURE_DIAGNOSTICS:=false}",
		"--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}",
		"--bootstrap-token-ttl=${KAIROS_BOOTSTRAP_TOKEN_TTL:=15m}",
		"--v=${KAIROS_BOOTSTRAP_LOG_LEVEL:=2}",
	} {
		assert.Contains(t, c.Args, arg)
	}
	for _, arg := range c.Args {
		assert.False(t, strings.HasPrefix(arg, "--namespace="), "clusterctl installs providers watching all namespaces: %s", arg)
	}

	// Restricted Pod Security Standard.
	if assert.NotNil(t, pod.SecurityContext) {
		assert.Equal(t, ptrTo(true), pod.SecurityContext.RunAsNonRoot)
		if assert.NotNil(t, pod.SecurityContext.SeccompProfile) {
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
		}
	}
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, ptrTo(false), sc.AllowPrivilegeEscalation)
	if assert.NotNil(t, sc.Capabilities) {
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
		assert.Empty(t, sc.Capabilities.Add)
	}
	assert.Equal(t, ptrTo(true), sc.ReadOnlyRootFilesystem)
	assert.Equal(t, ptrTo(restrictedUser), sc.RunAsUser)
	assert.NotEqual(t, ptrTo(true), sc.Privileged)

	// Probes on the manager's --health-addr (:9440).
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		return 0
	}
	for path, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if !assert.NotNil(t, probe, path) || !assert.NotNil(t, probe.HTTPGet, path) {
			continue
		}
		assert.Equal(t, path, probe.HTTPGet.Path)
		p := probe.HTTPGet.Port
		if p.Type == intstr.String {
			assert.Equal(t, int32(9440), port(p.StrVal), "probe %s port %s", path, p.StrVal)
		} else {
			assert.Equal(t, int32(9440), p.IntVal, "probe %s", path)
		}
	}

	assert.False(t, c.Resources.Requests.Cpu().IsZero(), "cpu request")
	assert.False(t, c.Resources.Requests.Memory().IsZero(), "memory request")
	assert.Equal(t, ptrTo(int64(10)), pod.TerminationGracePeriodSeconds)
	assert.Equal(t, bsPrefix+"manager", pod.ServiceAccountName)
	assert.NotNil(t, Find(b.objs, "ServiceAccount", pod.ServiceAccountName), "the Deployment's ServiceAccount ships with it")
	assert.Contains(t, pod.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})

	// Webhook serving: port 9443 and the cert-manager Secret at the --webhook-cert-dir default.
	assert.Equal(t, int32(9443), port(webhookPortName))
	cert := certificate(t, b.objs)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	var volume string
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secretName {
			volume = v.Name
		}
	}
	require.NotEmpty(t, volume, "no volume from the Certificate's Secret %s", secretName)
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: webhookCertDir, ReadOnly: true})
}

func TestBootstrapCRDs(t *testing.T) {
	b := bootstrapComponents(t)
	crds := OfKind(b.objs, "CustomResourceDefinition")
	require.Len(t, crds, 2)
	group := bootstrapv1.GroupVersion.Group
	want := map[string]string{
		contract.CalculateCRDName(group, "KairosConfig"):         "KairosConfig",
		contract.CalculateCRDName(group, "KairosConfigTemplate"): "KairosConfigTemplate",
	}
	for _, u := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, Convert(u, crd))
		kind, ok := want[crd.Name]
		if !assert.True(t, ok, "unexpected CRD %s", crd.Name) {
			continue
		}
		delete(want, crd.Name)
		assert.Equal(t, kind, crd.Spec.Names.Kind)
		assert.Equal(t, group, crd.Spec.Group)
		assert.Equal(t, "v1beta2", crd.Labels[contractLabel], "%s contract label", crd.Name)
		assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope, crd.Name)
		assert.Contains(t, crd.Spec.Names.Categories, "cluster-api", crd.Name)
		// One version, served and stored: nothing to convert.
		if assert.Len(t, crd.Spec.Versions, 1, crd.Name) {
			v := crd.Spec.Versions[0]
			assert.Equal(t, bootstrapv1.GroupVersion.Version, v.Name)
			assert.True(t, v.Served && v.Storage, crd.Name)
		}
		if crd.Spec.Conversion != nil {
			assert.Equal(t, apiextensionsv1.NoneConverter, crd.Spec.Conversion.Strategy, crd.Name)
		}
		assert.NotContains(t, crd.Annotations, injectCAFrom, "no conversion webhook, no CA to inject")
	}
	assert.Empty(t, want, "CRDs missing")
}

// markerWebhook is one +kubebuilder:webhook marker of bootstrap/internal/webhooks.
type markerWebhook struct {
	path     string
	mutating bool
}

func webhookMarkers(t *testing.T, root string) []markerWebhook {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "bootstrap", "internal", "webhooks", "*.go"))
	require.NoError(t, err)
	pathRe := regexp.MustCompile(`[:,]path=([^,\s]+)`)
	mutRe := regexp.MustCompile(`[:,]mutating=(true|false)`)
	var out []markerWebhook
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "+kubebuilder:webhook:") {
				continue
			}
			p, m := pathRe.FindStringSubmatch(line), mutRe.FindStringSubmatch(line)
			require.NotNil(t, p, "marker without path in %s: %s", f, line)
			require.NotNil(t, m, "marker without mutating in %s: %s", f, line)
			out = append(out, markerWebhook{path: p[1], mutating: m[1] == "true"})
		}
	}
	require.NotEmpty(t, out, "no +kubebuilder:webhook markers found")
	return out
}

func TestBootstrapWebhookConfigurations(t *testing.T) {
	b := bootstrapComponents(t)
	svcName := bsPrefix + "webhook-service"
	svc := &corev1.Service{}
	require.NoError(t, Convert(only(t, b.objs, "Service"), svc))
	require.Equal(t, svcName, svc.Name)
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, int32(443), svc.Spec.Ports[0].Port)
	assert.Equal(t, intstr.FromString(webhookPortName), svc.Spec.Ports[0].TargetPort)

	mwc := &admissionv1.MutatingWebhookConfiguration{}
	require.NoError(t, Convert(only(t, b.objs, "MutatingWebhookConfiguration"), mwc))
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	require.NoError(t, Convert(only(t, b.objs, "ValidatingWebhookConfiguration"), vwc))

	wantCA := bsNamespace + "/" + bsPrefix + "serving-cert"
	assert.Equal(t, wantCA, mwc.Annotations[injectCAFrom])
	assert.Equal(t, wantCA, vwc.Annotations[injectCAFrom])

	served := map[string]bool{} // path -> mutating
	check := func(name string, cc admissionv1.WebhookClientConfig, mutating bool) {
		if !assert.NotNil(t, cc.Service, name) {
			return
		}
		assert.Equal(t, svcName, cc.Service.Name, name)
		assert.Equal(t, bsNamespace, cc.Service.Namespace, name)
		if cc.Service.Port != nil {
			assert.Equal(t, int32(443), *cc.Service.Port, name)
		}
		if assert.NotNil(t, cc.Service.Path, name) {
			served[*cc.Service.Path] = mutating
		}
	}
	for _, w := range mwc.Webhooks {
		check(w.Name, w.ClientConfig, true)
	}
	for _, w := range vwc.Webhooks {
		check(w.Name, w.ClientConfig, false)
	}

	markers := webhookMarkers(t, b.root)
	fromMarkers := map[string]bool{}
	for _, m := range markers {
		fromMarkers[m.path] = m.mutating
	}
	assert.Equal(t, fromMarkers, served, "webhook configurations and +kubebuilder:webhook markers disagree")

	// controller-runtime serves defaulting/validation webhooks at paths derived from the
	// GVK; every kind gets both, at exactly those paths.
	gv := bootstrapv1.GroupVersion
	for _, kind := range []string{"KairosConfig", "KairosConfigTemplate"} {
		suffix := strings.ReplaceAll(gv.Group, ".", "-") + "-" + gv.Version + "-" + strings.ToLower(kind)
		mutating, ok := served["/mutate-"+suffix]
		assert.True(t, ok && mutating, "no mutating webhook /mutate-%s", suffix)
		mutating, ok = served["/validate-"+suffix]
		assert.True(t, ok && !mutating, "no validating webhook /validate-%s", suffix)
	}
}

func certificate(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	cert := only(t, objs, "Certificate")
	require.Equal(t, "cert-manager.io/v1", cert.GetAPIVersion())
	return cert
}

func TestBootstrapCertificate(t *testing.T) {
	b := bootstrapComponents(t)
	cert := certificate(t, b.objs)
	assert.Equal(t, bsPrefix+"serving-cert", cert.GetName())

	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Equal(t, []string{
		"kairos-bootstrap-webhook-service.kairos-bootstrap-system.svc",
		"kairos-bootstrap-webhook-service.kairos-bootstrap-system.svc.cluster.local",
	}, dnsNames)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, bsPrefix+"webhook-service-cert", secretName)

	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	assert.Equal(t, "Issuer", issuerKind)
	issuer := Find(b.objs, "Issuer", issuerName)
	if assert.NotNil(t, issuer, "Issuer %s referenced by the Certificate", issuerName) {
		_, selfSigned, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned")
		assert.True(t, selfSigned)
	}
}

// ---- RBAC ----

func ptrTo[T any](v T) *T { return &v }

// allows tells whether rules grant verb on group/resource (no resourceNames support
// needed: a rule restricted to names does not grant the whole resource).
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if len(r.ResourceNames) > 0 {
			continue
		}
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

func boundTo(subjects []rbacv1.Subject, sa, ns string) bool {
	return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ns
	})
}

// managerRules returns the rules the Deployment's ServiceAccount gets cluster-wide and in
// its own namespace from the shipped (Cluster)Roles and bindings.
func managerRules(t *testing.T, objs []*unstructured.Unstructured, sa string) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	for _, u := range OfKind(objs, "ClusterRoleBinding") {
		crb := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, Convert(u, crb))
		if !boundTo(crb.Subjects, sa, bsNamespace) {
			continue
		}
		require.Equal(t, "ClusterRole", crb.RoleRef.Kind)
		cr := Find(objs, "ClusterRole", crb.RoleRef.Name)
		require.NotNil(t, cr, "ClusterRoleBinding %s refers to missing ClusterRole %s", crb.Name, crb.RoleRef.Name)
		role := &rbacv1.ClusterRole{}
		require.NoError(t, Convert(cr, role))
		cluster = append(cluster, role.Rules...)
	}
	for _, u := range OfKind(objs, "RoleBinding") {
		rb := &rbacv1.RoleBinding{}
		require.NoError(t, Convert(u, rb))
		if rb.Namespace != bsNamespace || !boundTo(rb.Subjects, sa, bsNamespace) {
			continue
		}
		ref := Find(objs, rb.RoleRef.Kind, rb.RoleRef.Name)
		require.NotNil(t, ref, "RoleBinding %s refers to missing %s %s", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name)
		role := &rbacv1.Role{}
		require.NoError(t, Convert(ref, role))
		namespaced = append(namespaced, role.Rules...)
	}
	return cluster, namespaced
}

func TestBootstrapRBACLeastPrivilege(t *testing.T) {
	b := bootstrapComponents(t)
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, u := range OfKind(b.objs, kind) {
			role := &rbacv1.ClusterRole{}
			require.NoError(t, Convert(u, role))
			assert.Nil(t, role.AggregationRule, "%s %s", kind, role.Name)
			for _, r := range role.Rules {
				for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs} {
					assert.NotContains(t, field, "*", "%s %s grants a wildcard: %+v", kind, role.Name, r)
				}
				for _, v := range []string{"escalate", "bind", "impersonate"} {
					assert.NotContains(t, r.Verbs, v, "%s %s: %+v", kind, role.Name, r)
				}
			}
			assert.False(t, allows(role.Rules, "", "secrets", "delete"), "%s %s may delete Secrets", kind, role.Name)
			assert.False(t, allows(role.Rules, "", "secrets", "deletecollection"), "%s %s may delete Secrets", kind, role.Name)
		}
	}
}

func TestBootstrapRBACBoundToManager(t *testing.T) {
	b := bootstrapComponents(t)
	d, _ := managerDeployment(t, b.objs)
	sa := d.Spec.Template.Spec.ServiceAccountName
	require.NotNil(t, Find(b.objs, "ServiceAccount", sa))

	cr := only(t, b.objs, "ClusterRole")
	assert.Equal(t, bsPrefix+"manager-role", cr.GetName())
	crb := &rbacv1.ClusterRoleBinding{}
	require.NoError(t, Convert(only(t, b.objs, "ClusterRoleBinding"), crb))
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.GetName()}, crb.RoleRef)
	assert.True(t, boundTo(crb.Subjects, sa, bsNamespace), "%s not bound to ServiceAccount %s/%s", cr.GetName(), bsNamespace, sa)

	cluster, namespaced := managerRules(t, b.objs, sa)
	// What the manager cannot run without: its own kinds, and the Secrets it writes.
	for _, want := range []struct{ group, resource, verb string }{
		{bootstrapv1.GroupVersion.Group, "kairosconfigs", "watch"},
		{bootstrapv1.GroupVersion.Group, "kairosconfigs/status", "patch"},
		{"", "secrets", "create"},
	} {
		assert.True(t, allows(cluster, want.group, want.resource, want.verb), "manager may not %s %s", want.verb, want.resource)
	}
	// --leader-elect: the Lease lives in the manager's namespace (Role or ClusterRole).
	all := append(slices.Clone(cluster), namespaced...)
	for _, verb := range []string{"get", "create", "update"} {
		assert.True(t, allows(all, "coordination.k8s.io", "leases", verb), "leader election needs leases %s", verb)
	}
}
