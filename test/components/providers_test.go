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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/util/contract"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

const (
	providerLabel   = "cluster.x-k8s.io/provider"
	contractLabel   = "cluster.x-k8s.io/v1beta2"
	injectCAFrom    = "cert-manager.io/inject-ca-from"
	webhookCertDir  = "/tmp/k8s-webhook-server/serving-certs"
	restrictedUser  = int64(65532)
	webhookPortName = "webhook-server"
	// infrastructureGroup is the only API group whose resources a manager may reach with a
	// wildcard, and only the control-plane manager: it clones infrastructure machine templates
	// of any provider, whose kinds it cannot know in advance.
	infrastructureGroup = "infrastructure.cluster.x-k8s.io"
)

// access is one thing a manager cannot run without.
type access struct{ group, resource, verb string }

// provider is what one provider's components YAML must be; every test below runs for each.
type provider struct {
	name      string // the provider directory: bootstrap or controlplane
	label     string // clusterctl's provider label value
	namespace string
	prefix    string
	varPrefix string
	image     string
	gv        schema.GroupVersion
	kinds     []string // the CRD kinds, each with defaulting and validating webhooks
	scalable  string   // the kind with a scale subresource, if any
	args      []string // the manager's arguments, exactly
	// infraWildcards is how many rules may grant every resource of infrastructureGroup.
	infraWildcards int
	needs          []access

	once  sync.Once
	build built
}

type built struct {
	root string
	objs []*unstructured.Unstructured
	yaml []byte
	err  error
}

var (
	bootstrapProvider = &provider{
		name:      "bootstrap",
		label:     "bootstrap-kairos",
		namespace: "kairos-bootstrap-system",
		prefix:    "kairos-bootstrap-",
		varPrefix: "KAIROS_BOOTSTRAP_",
		image:     "ghcr.io/kairos-capi/kairos-bootstrap-manager:dev",
		gv:        bootstrapv1.GroupVersion,
		kinds:     []string{"KairosConfig", "KairosConfigTemplate"},
		args: []string{
			"--leader-elect",
			"--diagnostics-address=${KAIROS_BOOTSTRAP_DIAGNOSTICS_ADDRESS:=:8443}",
			"--insecure-diagnostics=${KAIROS_BOOTSTRAP_INSECURE_DIAGNOSTICS:=false}",
			"--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}",
			"--bootstrap-token-ttl=${KAIROS_BOOTSTRAP_TOKEN_TTL:=15m}",
			"--v=${KAIROS_BOOTSTRAP_LOG_LEVEL:=2}",
		},
		needs: []access{
			{bootstrapv1.GroupVersion.Group, "kairosconfigs", "watch"},
			{bootstrapv1.GroupVersion.Group, "kairosconfigs/status", "patch"},
			{"", "secrets", "create"},
		},
	}
	controlPlaneProvider = &provider{
		name:      "controlplane",
		label:     "control-plane-kairos",
		namespace: "kairos-controlplane-system",
		prefix:    "kairos-controlplane-",
		varPrefix: "KAIROS_CONTROLPLANE_",
		image:     "ghcr.io/kairos-capi/kairos-controlplane-manager:dev",
		gv:        controlplanev1.GroupVersion,
		kinds:     []string{"KairosControlPlane", "KairosControlPlaneTemplate"},
		scalable:  "KairosControlPlane",
		args: []string{
			"--leader-elect",
			"--diagnostics-address=${KAIROS_CONTROLPLANE_DIAGNOSTICS_ADDRESS:=:8443}",
			"--insecure-diagnostics=${KAIROS_CONTROLPLANE_INSECURE_DIAGNOSTICS:=false}",
			"--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true},InPlaceUpdates=${EXP_IN_PLACE_UPDATES:=false}",
			"--v=${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}",
		},
		infraWildcards: 1,
		needs: []access{
			{controlplanev1.GroupVersion.Group, "kairoscontrolplanes", "watch"},
			{controlplanev1.GroupVersion.Group, "kairoscontrolplanes", "patch"},
			{controlplanev1.GroupVersion.Group, "kairoscontrolplanes/status", "patch"},
			{controlplanev1.GroupVersion.Group, "kairoscontrolplanes/finalizers", "update"},
			{bootstrapv1.GroupVersion.Group, "kairosconfigs", "create"},
			{bootstrapv1.GroupVersion.Group, "kairosconfigs", "delete"},
			{bootstrapv1.GroupVersion.Group, "kairosconfigtemplates", "get"},
			{"cluster.x-k8s.io", "clusters", "watch"},
			{"cluster.x-k8s.io", "machines", "create"},
			{"cluster.x-k8s.io", "machines", "delete"},
			{"cluster.x-k8s.io", "machines", "watch"},
			{infrastructureGroup, "testmachinetemplates", "get"},
			{infrastructureGroup, "testmachines", "create"},
			{infrastructureGroup, "testmachines", "delete"},
			{"", "secrets", "create"},
			{"", "secrets", "update"},
			{"apiextensions.k8s.io", "customresourcedefinitions", "get"},
			// With --feature-gates=InPlaceUpdates=true: the read-only ExtensionConfig reconciler
			// and the runtime client's namespaceSelectors (controlplane/setup.NewRuntimeClient).
			{"runtime.cluster.x-k8s.io", "extensionconfigs", "list"},
			{"runtime.cluster.x-k8s.io", "extensionconfigs", "watch"},
			{"", "namespaces", "list"},
			{"", "namespaces", "watch"},
		},
	}
	providers = []*provider{bootstrapProvider, controlPlaneProvider}
)

// components builds <provider>/config/default once per test binary.
func (p *provider) components(t *testing.T) built {
	t.Helper()
	p.once.Do(func() {
		root, err := RepoRoot("")
		if err != nil {
			p.build.err = err
			return
		}
		p.build.root = root
		p.build.objs, p.build.yaml, p.build.err = Build(filepath.Join(root, p.name, "config", "default"))
	})
	require.NoError(t, p.build.err)
	require.NotEmpty(t, p.build.objs)
	return p.build
}

// forEachProvider runs test as a subtest per provider with that provider's components.
func forEachProvider(t *testing.T, test func(t *testing.T, p *provider, b built)) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) { test(t, p, p.components(t)) })
	}
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

func certificate(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	cert := only(t, objs, "Certificate")
	require.Equal(t, "cert-manager.io/v1", cert.GetAPIVersion())
	return cert
}

func ptrTo[T any](v T) *T { return &v }

// The files controller-gen writes (make generate). The build needs them; their absence must
// fail the tests, not skip them.
func TestGeneratedFilesExist(t *testing.T) {
	root, err := RepoRoot("")
	require.NoError(t, err)
	for _, p := range providers {
		files := []string{filepath.Join(p.name, "config", "rbac", "role.yaml"), filepath.Join(p.name, "config", "webhook", "manifests.yaml")}
		for _, kind := range p.kinds {
			// controller-gen names CRD files <group>_<plural>.yaml.
			plural, _, _ := strings.Cut(contract.CalculateCRDName(p.gv.Group, kind), ".")
			files = append(files, filepath.Join(p.name, "config", "crd", "bases", p.gv.Group+"_"+plural+".yaml"))
		}
		for _, f := range files {
			info, err := os.Stat(filepath.Join(root, f))
			if assert.NoError(t, err, "%s is missing: run `make generate`", f) {
				assert.NotZero(t, info.Size(), "%s is empty", f)
			}
		}
	}
}

func TestComponentsKinds(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		// Exactly what a provider ships, nothing more and nothing less.
		kinds := map[string]int{}
		for _, o := range b.objs {
			kinds[o.GetKind()]++
		}
		assert.Equal(t, map[string]int{
			"Namespace":                      1,
			"CustomResourceDefinition":       len(p.kinds),
			"ServiceAccount":                 1,
			"ClusterRole":                    1,
			"ClusterRoleBinding":             1,
			"Role":                           1,
			"RoleBinding":                    1,
			"Service":                        1,
			"Deployment":                     1,
			"Issuer":                         1,
			"Certificate":                    1,
			"MutatingWebhookConfiguration":   1,
			"ValidatingWebhookConfiguration": 1,
		}, kinds)
	})
}

func TestComponentsNamespaceAndNames(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		assert.Equal(t, p.namespace, only(t, b.objs, "Namespace").GetName())
		for _, o := range b.objs {
			if ClusterScoped[o.GetKind()] {
				assert.Empty(t, o.GetNamespace(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
			} else {
				assert.Equal(t, p.namespace, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
			}
			if o.GetKind() != "CustomResourceDefinition" { // CRD names are <plural>.<group>
				assert.True(t, strings.HasPrefix(o.GetName(), p.prefix), "%s %s lacks the %s prefix", o.GetKind(), o.GetName(), p.prefix)
			}
		}
	})
}

func TestComponentsProviderLabelOnEveryObject(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		for _, o := range b.objs {
			assert.Equal(t, p.label, o.GetLabels()[providerLabel], "%s %s", o.GetKind(), o.GetName())
		}
		// includeSelectors: the Deployment's Pods and the webhook Service select this provider only.
		d, _ := managerDeployment(t, b.objs)
		assert.Equal(t, p.label, d.Spec.Selector.MatchLabels[providerLabel])
		assert.Equal(t, p.label, d.Spec.Template.Labels[providerLabel])
		svc := &corev1.Service{}
		require.NoError(t, Convert(only(t, b.objs, "Service"), svc))
		assert.Equal(t, p.label, svc.Spec.Selector[providerLabel])
		for k, v := range svc.Spec.Selector {
			assert.Equal(t, v, d.Spec.Template.Labels[k], "Service selector %s must match the manager Pods", k)
		}
	})
}

func TestComponentsVariablesHaveDefaults(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		// clusterctl substitutes ${...} anywhere in the file; every variable must have a default
		// so that `clusterctl init` works with no variable set.
		vars := regexp.MustCompile(`\$\{([^}]*)\}`).FindAllStringSubmatch(string(b.yaml), -1)
		require.NotEmpty(t, vars)
		for _, m := range vars {
			assert.Regexp(t, `^[A-Z][A-Z0-9_]*:=.+$`, m[1], "variable %s has no default", m[0])
			name, _, _ := strings.Cut(m[1], ":=")
			// Provider variables carry the provider's name; the feature gate variables are
			// Cluster API's own (its kubeadm providers read the same ones).
			if name != "EXP_MACHINE_POOL" && name != "EXP_IN_PLACE_UPDATES" {
				assert.True(t, strings.HasPrefix(name, p.varPrefix), "variable %s is not prefixed %s", name, p.varPrefix)
			}
		}
	})
}

func TestComponentsManagerDeployment(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		d, c := managerDeployment(t, b.objs)
		pod := d.Spec.Template.Spec

		assert.Equal(t, p.prefix+"controller-manager", d.Name)
		assert.Equal(t, "manager", c.Name, "clusterctl requires the container to be named manager")
		assert.Equal(t, p.image, c.Image)
		assert.Empty(t, c.Command, "the image entrypoint (ko puts the binary at /ko-app/<name>) must run, not an overridden command")
		// No --namespace: clusterctl installs providers watching all namespaces.
		assert.ElementsMatch(t, p.args, c.Args)

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
			hp := probe.HTTPGet.Port
			if hp.Type == intstr.String {
				assert.Equal(t, int32(9440), port(hp.StrVal), "probe %s port %s", path, hp.StrVal)
			} else {
				assert.Equal(t, int32(9440), hp.IntVal, "probe %s", path)
			}
		}

		assert.False(t, c.Resources.Requests.Cpu().IsZero(), "cpu request")
		assert.False(t, c.Resources.Requests.Memory().IsZero(), "memory request")
		assert.Equal(t, ptrTo(int64(10)), pod.TerminationGracePeriodSeconds)
		assert.Equal(t, p.prefix+"manager", pod.ServiceAccountName)
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
	})
}

func TestComponentsCRDs(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		crds := OfKind(b.objs, "CustomResourceDefinition")
		want := map[string]string{}
		for _, kind := range p.kinds {
			want[contract.CalculateCRDName(p.gv.Group, kind)] = kind
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
			assert.Equal(t, p.gv.Group, crd.Spec.Group)
			assert.Equal(t, "v1beta2", crd.Labels[contractLabel], "%s contract label", crd.Name)
			assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope, crd.Name)
			assert.Contains(t, crd.Spec.Names.Categories, "cluster-api", crd.Name)
			if crd.Spec.Conversion != nil {
				assert.Equal(t, apiextensionsv1.NoneConverter, crd.Spec.Conversion.Strategy, crd.Name)
			}
			assert.NotContains(t, crd.Annotations, injectCAFrom, "no conversion webhook, no CA to inject")
			// One version, served and stored: nothing to convert.
			if !assert.Len(t, crd.Spec.Versions, 1, crd.Name) {
				continue
			}
			v := crd.Spec.Versions[0]
			assert.Equal(t, p.gv.Version, v.Name)
			assert.True(t, v.Served && v.Storage, crd.Name)
			if strings.HasSuffix(kind, "Template") {
				if v.Subresources != nil {
					assert.Nil(t, v.Subresources.Scale, "%s: a template is not scalable", crd.Name)
				}
				continue
			}
			if !assert.NotNil(t, v.Subresources, crd.Name) {
				continue
			}
			assert.NotNil(t, v.Subresources.Status, "%s status subresource", crd.Name)
			if kind != p.scalable {
				assert.Nil(t, v.Subresources.Scale, "%s is not scalable", crd.Name)
				continue
			}
			// The control-plane contract: the scale subresource over spec.replicas,
			// status.replicas and status.selector.
			if assert.NotNil(t, v.Subresources.Scale, "%s scale subresource", crd.Name) {
				assert.Equal(t, ".spec.replicas", v.Subresources.Scale.SpecReplicasPath)
				assert.Equal(t, ".status.replicas", v.Subresources.Scale.StatusReplicasPath)
				assert.Equal(t, ptrTo(".status.selector"), v.Subresources.Scale.LabelSelectorPath)
			}
		}
		assert.Empty(t, want, "CRDs missing")
	})
}

// markerWebhook is one +kubebuilder:webhook marker of <provider>/internal/webhooks.
type markerWebhook struct {
	path     string
	mutating bool
}

func webhookMarkersOf(t *testing.T, root, provider string) []markerWebhook {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, provider, "internal", "webhooks", "*.go"))
	require.NoError(t, err)
	pathRe := regexp.MustCompile(`[:,]path=([^,\s]+)`)
	mutRe := regexp.MustCompile(`[:,]mutating=(true|false)`)
	var out []markerWebhook
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
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
	require.NotEmpty(t, out, "no +kubebuilder:webhook markers found under %s/internal/webhooks", provider)
	return out
}

func TestComponentsWebhookConfigurations(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		svcName := p.prefix + "webhook-service"
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

		wantCA := p.namespace + "/" + p.prefix + "serving-cert"
		assert.Equal(t, wantCA, mwc.Annotations[injectCAFrom])
		assert.Equal(t, wantCA, vwc.Annotations[injectCAFrom])

		served := map[string]bool{} // path -> mutating
		check := func(name string, cc admissionv1.WebhookClientConfig, policy *admissionv1.FailurePolicyType, mutating bool) {
			if assert.NotNil(t, policy, name) {
				assert.Equal(t, admissionv1.Fail, *policy, name)
			}
			if !assert.NotNil(t, cc.Service, name) {
				return
			}
			assert.Equal(t, svcName, cc.Service.Name, name)
			assert.Equal(t, p.namespace, cc.Service.Namespace, name)
			if cc.Service.Port != nil {
				assert.Equal(t, int32(443), *cc.Service.Port, name)
			}
			if assert.NotNil(t, cc.Service.Path, name) {
				served[*cc.Service.Path] = mutating
			}
		}
		for _, w := range mwc.Webhooks {
			check(w.Name, w.ClientConfig, w.FailurePolicy, true)
		}
		for _, w := range vwc.Webhooks {
			check(w.Name, w.ClientConfig, w.FailurePolicy, false)
		}

		fromMarkers := map[string]bool{}
		for _, m := range webhookMarkersOf(t, b.root, p.name) {
			fromMarkers[m.path] = m.mutating
		}
		assert.Equal(t, fromMarkers, served, "webhook configurations and +kubebuilder:webhook markers disagree")

		// controller-runtime serves defaulting/validation webhooks at paths derived from the
		// GVK; every kind gets both, at exactly those paths.
		for _, kind := range p.kinds {
			suffix := strings.ReplaceAll(p.gv.Group, ".", "-") + "-" + p.gv.Version + "-" + strings.ToLower(kind)
			mutating, ok := served["/mutate-"+suffix]
			assert.True(t, ok && mutating, "no mutating webhook /mutate-%s", suffix)
			mutating, ok = served["/validate-"+suffix]
			assert.True(t, ok && !mutating, "no validating webhook /validate-%s", suffix)
		}
	})
}

func TestComponentsCertificate(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		cert := certificate(t, b.objs)
		assert.Equal(t, p.prefix+"serving-cert", cert.GetName())

		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		assert.Equal(t, []string{
			p.prefix + "webhook-service." + p.namespace + ".svc",
			p.prefix + "webhook-service." + p.namespace + ".svc.cluster.local",
		}, dnsNames)
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		assert.Equal(t, p.prefix+"webhook-service-cert", secretName)

		issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
		issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
		assert.Equal(t, "Issuer", issuerKind)
		issuer := Find(b.objs, "Issuer", issuerName)
		if assert.NotNil(t, issuer, "Issuer %s referenced by the Certificate", issuerName) {
			_, selfSigned, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned")
			assert.True(t, selfSigned)
		}
	})
}

// ---- RBAC ----

// allows tells whether rules grant verb on group/resource (a rule restricted to resourceNames
// does not grant the whole resource).
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

// rulesBoundTo returns the rules the ServiceAccount ns/sa gets cluster-wide and in ns from the
// shipped (Cluster)Roles and bindings.
func rulesBoundTo(t *testing.T, objs []*unstructured.Unstructured, sa, ns string) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	for _, u := range OfKind(objs, "ClusterRoleBinding") {
		crb := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, Convert(u, crb))
		if !boundTo(crb.Subjects, sa, ns) {
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
		if rb.Namespace != ns || !boundTo(rb.Subjects, sa, ns) {
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

// isInfrastructureWildcard tells whether r is the one wildcard the control plane may hold: all
// resources of the infrastructure group, and of that group only, with named verbs.
func isInfrastructureWildcard(r rbacv1.PolicyRule) bool {
	return slices.Equal(r.APIGroups, []string{infrastructureGroup}) && slices.Equal(r.Resources, []string{"*"}) &&
		len(r.ResourceNames) == 0 && len(r.NonResourceURLs) == 0 && !slices.Contains(r.Verbs, "*")
}

func TestComponentsRBACLeastPrivilege(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		infraWildcards := 0
		for _, kind := range []string{"ClusterRole", "Role"} {
			for _, u := range OfKind(b.objs, kind) {
				role := &rbacv1.ClusterRole{}
				require.NoError(t, Convert(u, role))
				assert.Nil(t, role.AggregationRule, "%s %s", kind, role.Name)
				for _, r := range role.Rules {
					if isInfrastructureWildcard(r) {
						infraWildcards++
					} else {
						// Also "*/scale"-style wildcards over subresources of every resource.
						for _, res := range r.Resources {
							assert.NotContains(t, res, "*", "%s %s grants a resource wildcard: %+v", kind, role.Name, r)
						}
					}
					for _, field := range [][]string{r.APIGroups, r.Verbs, r.NonResourceURLs} {
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
		assert.Equal(t, p.infraWildcards, infraWildcards, "rules granting resources * of group %s", infrastructureGroup)
	})
}

func TestComponentsRBACBoundToManager(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p *provider, b built) {
		d, _ := managerDeployment(t, b.objs)
		sa := d.Spec.Template.Spec.ServiceAccountName
		require.NotNil(t, Find(b.objs, "ServiceAccount", sa))

		cr := only(t, b.objs, "ClusterRole")
		assert.Equal(t, p.prefix+"manager-role", cr.GetName())
		crb := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, Convert(only(t, b.objs, "ClusterRoleBinding"), crb))
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.GetName()}, crb.RoleRef)
		assert.True(t, boundTo(crb.Subjects, sa, p.namespace), "%s not bound to ServiceAccount %s/%s", cr.GetName(), p.namespace, sa)

		role := only(t, b.objs, "Role")
		assert.Equal(t, p.namespace, role.GetNamespace())
		rb := &rbacv1.RoleBinding{}
		require.NoError(t, Convert(only(t, b.objs, "RoleBinding"), rb))
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.GetName()}, rb.RoleRef)
		assert.True(t, boundTo(rb.Subjects, sa, p.namespace), "%s not bound to ServiceAccount %s/%s", role.GetName(), p.namespace, sa)

		cluster, namespaced := rulesBoundTo(t, b.objs, sa, p.namespace)
		for _, want := range p.needs {
			assert.True(t, allows(cluster, want.group, want.resource, want.verb), "manager may not %s %s.%s", want.verb, want.resource, want.group)
		}
		// --leader-elect: the Lease lives in the manager's namespace.
		for _, verb := range []string{"get", "create", "update"} {
			assert.True(t, allows(namespaced, "coordination.k8s.io", "leases", verb), "leader election needs leases %s in %s", verb, p.namespace)
		}
		assert.False(t, allows(cluster, "coordination.k8s.io", "leases", "update"), "Lease access belongs in the namespaced Role, not cluster-wide")
	})
}

// Both managers run under the same restricted security context.
func TestComponentsSameSecurityContext(t *testing.T) {
	bd, bc := managerDeployment(t, bootstrapProvider.components(t).objs)
	cd, cc := managerDeployment(t, controlPlaneProvider.components(t).objs)
	assert.Equal(t, bd.Spec.Template.Spec.SecurityContext, cd.Spec.Template.Spec.SecurityContext)
	assert.Equal(t, bc.SecurityContext, cc.SecurityContext)
}
