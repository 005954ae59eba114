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
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/util/contract"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

const (
	cpNamespace    = "kairos-controlplane-system"
	cpPrefix       = "kairos-controlplane-"
	cpProvider     = "control-plane-kairos"
	cpManagerImage = "ghcr.io/kairos-capi/kairos-controlplane-manager:dev"
	// infrastructureGroup is the only API group whose resources the control-plane manager may
	// reach with a wildcard: it clones infrastructure machine templates of any provider, whose
	// kinds it cannot know in advance.
	infrastructureGroup = "infrastructure.cluster.x-k8s.io"
)

// The control-plane provider's controller-gen outputs (make generate).
var cpGeneratedFiles = []string{
	"controlplane/config/crd/bases/controlplane.cluster.x-k8s.io_kairoscontrolplanes.yaml",
	"controlplane/config/crd/bases/controlplane.cluster.x-k8s.io_kairoscontrolplanetemplates.yaml",
	"controlplane/config/rbac/role.yaml",
	"controlplane/config/webhook/manifests.yaml",
}

var (
	controlPlaneOnce  sync.Once
	controlPlaneBuild built
)

// controlPlaneComponents builds controlplane/config/default once per test binary.
func controlPlaneComponents(t *testing.T) built {
	t.Helper()
	controlPlaneOnce.Do(func() {
		root, err := RepoRoot("")
		if err != nil {
			controlPlaneBuild.err = err
			return
		}
		controlPlaneBuild.root = root
		controlPlaneBuild.objs, controlPlaneBuild.yaml, controlPlaneBuild.err = Build(filepath.Join(root, "controlplane", "config", "default"))
	})
	require.NoError(t, controlPlaneBuild.err)
	require.NotEmpty(t, controlPlaneBuild.objs)
	return controlPlaneBuild
}

func TestControlPlaneGeneratedFilesExist(t *testing.T) {
	root, err := RepoRoot("")
	require.NoError(t, err)
	for _, f := range cpGeneratedFiles {
		info, err := os.Stat(filepath.Join(root, f))
		if assert.NoError(t, err, "%s is missing: run `make generate`", f) {
			assert.NotZero(t, info.Size(), "%s is empty", f)
		}
	}
}

func TestControlPlaneBuilds(t *testing.T) {
	b := controlPlaneComponents(t)
	var ids []string
	for _, o := range b.objs {
		ids = append(ids, o.GetKind()+"/"+o.GetName()+"/"+o.GetNamespace())
	}
	t.Logf("rendered objects:\n%s", strings.Join(ids, "\n"))

	// Exactly what a control-plane provider ships, nothing more and nothing less.
	kinds := map[string]int{}
	for _, o := range b.objs {
		kinds[o.GetKind()]++
	}
	assert.Equal(t, map[string]int{
		"Namespace":                      1,
		"CustomResourceDefinition":       2,
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
}

func TestControlPlaneSingleNamespace(t *testing.T) {
	b := controlPlaneComponents(t)
	ns := only(t, b.objs, "Namespace")
	assert.Equal(t, cpNamespace, ns.GetName())
}

func TestControlPlaneProviderLabelOnEveryObject(t *testing.T) {
	b := controlPlaneComponents(t)
	for _, o := range b.objs {
		assert.Equal(t, cpProvider, o.GetLabels()[providerLabel], "%s %s", o.GetKind(), o.GetName())
	}
	// includeSelectors: the Deployment's Pods and the webhook Service select this provider only.
	d, _ := managerDeployment(t, b.objs)
	assert.Equal(t, cpProvider, d.Spec.Selector.MatchLabels[providerLabel])
	assert.Equal(t, cpProvider, d.Spec.Template.Labels[providerLabel])
	svc := &corev1.Service{}
	require.NoError(t, Convert(only(t, b.objs, "Service"), svc))
	assert.Equal(t, cpProvider, svc.Spec.Selector[providerLabel])
	for k, v := range svc.Spec.Selector {
		assert.Equal(t, v, d.Spec.Template.Labels[k], "Service selector %s must match the manager Pods", k)
	}
}

func TestControlPlaneNamespaces(t *testing.T) {
	b := controlPlaneComponents(t)
	for _, o := range b.objs {
		if ClusterScoped[o.GetKind()] {
			assert.Empty(t, o.GetNamespace(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
			continue
		}
		assert.Equal(t, cpNamespace, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
	}
}

func TestControlPlaneNamePrefix(t *testing.T) {
	b := controlPlaneComponents(t)
	for _, o := range b.objs {
		if o.GetKind() == "CustomResourceDefinition" {
			continue // CRD names are <plural>.<group>
		}
		assert.True(t, strings.HasPrefix(o.GetName(), cpPrefix), "%s %s lacks the %s prefix", o.GetKind(), o.GetName(), cpPrefix)
	}
}

func TestControlPlaneVariablesHaveDefaults(t *testing.T) {
	b := controlPlaneComponents(t)
	// clusterctl substitutes ${...} anywhere in the file; every variable must have a default
	// so that `clusterctl init --control-plane kairos` works with no variable set.
	vars := regexp.MustCompile(`\$\{([^}]*)\}`).FindAllStringSubmatch(string(b.yaml), -1)
	require.NotEmpty(t, vars)
	for _, m := range vars {
		assert.Regexp(t, `^[A-Z][A-Z0-9_]*:=.+$`, m[1], "variable %s has no default", m[0])
		name, _, _ := strings.Cut(m[1], ":=")
		// Provider variables carry the provider's name; EXP_MACHINE_POOL is Cluster API's own.
		if name != "EXP_MACHINE_POOL" {
			assert.True(t, strings.HasPrefix(name, "KAIROS_CONTROLPLANE_"), "variable %s is not prefixed KAIROS_CONTROLPLANE_", name)
		}
	}
}

func TestControlPlaneManagerDeployment(t *testing.T) {
	b := controlPlaneComponents(t)
	d, c := managerDeployment(t, b.objs)
	pod := d.Spec.Template.Spec

	assert.Equal(t, cpPrefix+"controller-manager", d.Name)
	assert.Equal(t, "manager", c.Name, "clusterctl requires the container to be named manager")
	assert.Equal(t, cpManagerImage, c.Image)
	assert.Empty(t, c.Command, "the image entrypoint (ko puts the binary at /ko-app/<name>) must run, not an overridden command")

	assert.ElementsMatch(t, []string{
		"--leader-elect",
		"--diagnostics-address=${KAIROS_CONTROLPLANE_DIAGNOSTICS_ADDRESS:=:8443}",
		"--insecure-diagnostics=${KAIROS_CONTROLPLANE_INSECURE_DIAGNOSTICS:=false}",
		"--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}",
		"--v=${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}",
	}, c.Args)
	for _, arg := range c.Args {
		assert.False(t, strings.HasPrefix(arg, "--namespace="), "clusterctl installs providers watching all namespaces: %s", arg)
	}

	// Restricted Pod Security Standard, exactly as the bootstrap manager.
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

	bd, bc := managerDeployment(t, bootstrapComponents(t).objs)
	assert.Equal(t, bd.Spec.Template.Spec.SecurityContext, pod.SecurityContext, "Pod securityContext differs from the bootstrap manager's")
	assert.Equal(t, bc.SecurityContext, c.SecurityContext, "container securityContext differs from the bootstrap manager's")

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
	assert.Equal(t, cpPrefix+"manager", pod.ServiceAccountName)
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

func TestControlPlaneCRDs(t *testing.T) {
	b := controlPlaneComponents(t)
	crds := OfKind(b.objs, "CustomResourceDefinition")
	require.Len(t, crds, 2)
	group := controlplanev1.GroupVersion.Group
	want := map[string]string{
		contract.CalculateCRDName(group, "KairosControlPlane"):         "KairosControlPlane",
		contract.CalculateCRDName(group, "KairosControlPlaneTemplate"): "KairosControlPlaneTemplate",
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
		if crd.Spec.Conversion != nil {
			assert.Equal(t, apiextensionsv1.NoneConverter, crd.Spec.Conversion.Strategy, crd.Name)
		}
		assert.NotContains(t, crd.Annotations, injectCAFrom, "no conversion webhook, no CA to inject")
		// One version, served and stored: nothing to convert.
		if !assert.Len(t, crd.Spec.Versions, 1, crd.Name) {
			continue
		}
		v := crd.Spec.Versions[0]
		assert.Equal(t, controlplanev1.GroupVersion.Version, v.Name)
		assert.True(t, v.Served && v.Storage, crd.Name)

		if kind == "KairosControlPlane" {
			// The control-plane contract: the scale subresource over spec.replicas,
			// status.replicas and status.selector, and a status subresource.
			if assert.NotNil(t, v.Subresources, crd.Name) {
				assert.NotNil(t, v.Subresources.Status, "%s status subresource", crd.Name)
				if assert.NotNil(t, v.Subresources.Scale, "%s scale subresource", crd.Name) {
					assert.Equal(t, ".spec.replicas", v.Subresources.Scale.SpecReplicasPath)
					assert.Equal(t, ".status.replicas", v.Subresources.Scale.StatusReplicasPath)
					assert.Equal(t, ptrTo(".status.selector"), v.Subresources.Scale.LabelSelectorPath)
				}
			}
		} else if v.Subresources != nil {
			assert.Nil(t, v.Subresources.Scale, "%s: a template is not scalable", crd.Name)
		}
	}
	assert.Empty(t, want, "CRDs missing")
}

// webhookMarkersOf returns the +kubebuilder:webhook markers of <provider>/internal/webhooks.
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

func TestControlPlaneWebhookConfigurations(t *testing.T) {
	b := controlPlaneComponents(t)
	svcName := cpPrefix + "webhook-service"
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

	wantCA := cpNamespace + "/" + cpPrefix + "serving-cert"
	assert.Equal(t, wantCA, mwc.Annotations[injectCAFrom])
	assert.Equal(t, wantCA, vwc.Annotations[injectCAFrom])

	served := map[string]bool{} // path -> mutating
	check := func(name string, cc admissionv1.WebhookClientConfig, mutating bool) {
		if !assert.NotNil(t, cc.Service, name) {
			return
		}
		assert.Equal(t, svcName, cc.Service.Name, name)
		assert.Equal(t, cpNamespace, cc.Service.Namespace, name)
		if cc.Service.Port != nil {
			assert.Equal(t, int32(443), *cc.Service.Port, name)
		}
		if assert.NotNil(t, cc.Service.Path, name) {
			served[*cc.Service.Path] = mutating
		}
	}
	for _, w := range mwc.Webhooks {
		check(w.Name, w.ClientConfig, true)
		if assert.NotNil(t, w.FailurePolicy, w.Name) {
			assert.Equal(t, admissionv1.Fail, *w.FailurePolicy, w.Name)
		}
	}
	for _, w := range vwc.Webhooks {
		check(w.Name, w.ClientConfig, false)
		if assert.NotNil(t, w.FailurePolicy, w.Name) {
			assert.Equal(t, admissionv1.Fail, *w.FailurePolicy, w.Name)
		}
	}

	fromMarkers := map[string]bool{}
	for _, m := range webhookMarkersOf(t, b.root, "controlplane") {
		fromMarkers[m.path] = m.mutating
	}
	assert.Equal(t, fromMarkers, served, "webhook configurations and +kubebuilder:webhook markers disagree")

	// controller-runtime serves defaulting/validation webhooks at paths derived from the
	// GVK; every kind gets both, at exactly those paths.
	gv := controlplanev1.GroupVersion
	for _, kind := range []string{"KairosControlPlane", "KairosControlPlaneTemplate"} {
		suffix := strings.ReplaceAll(gv.Group, ".", "-") + "-" + gv.Version + "-" + strings.ToLower(kind)
		mutating, ok := served["/mutate-"+suffix]
		assert.True(t, ok && mutating, "no mutating webhook /mutate-%s", suffix)
		mutating, ok = served["/validate-"+suffix]
		assert.True(t, ok && !mutating, "no validating webhook /validate-%s", suffix)
	}
}

func TestControlPlaneCertificate(t *testing.T) {
	b := controlPlaneComponents(t)
	cert := certificate(t, b.objs)
	assert.Equal(t, cpPrefix+"serving-cert", cert.GetName())

	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Equal(t, []string{
		"kairos-controlplane-webhook-service.kairos-controlplane-system.svc",
		"kairos-controlplane-webhook-service.kairos-controlplane-system.svc.cluster.local",
	}, dnsNames)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, cpPrefix+"webhook-service-cert", secretName)

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

func TestControlPlaneRBACLeastPrivilege(t *testing.T) {
	b := controlPlaneComponents(t)
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
						assert.NotContains(t, res, "*", "%s %s grants a resource wildcard outside group %s: %+v", kind, role.Name, infrastructureGroup, r)
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
	// Cloning infrastructure templates of any provider needs exactly one such rule.
	assert.Equal(t, 1, infraWildcards, "want exactly one rule granting resources * of group %s", infrastructureGroup)
}

func TestControlPlaneRBACBoundToManager(t *testing.T) {
	b := controlPlaneComponents(t)
	d, _ := managerDeployment(t, b.objs)
	sa := d.Spec.Template.Spec.ServiceAccountName
	require.NotNil(t, Find(b.objs, "ServiceAccount", sa))

	cr := only(t, b.objs, "ClusterRole")
	assert.Equal(t, cpPrefix+"manager-role", cr.GetName())
	crb := &rbacv1.ClusterRoleBinding{}
	require.NoError(t, Convert(only(t, b.objs, "ClusterRoleBinding"), crb))
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.GetName()}, crb.RoleRef)
	assert.True(t, boundTo(crb.Subjects, sa, cpNamespace), "%s not bound to ServiceAccount %s/%s", cr.GetName(), cpNamespace, sa)

	role := only(t, b.objs, "Role")
	assert.Equal(t, cpNamespace, role.GetNamespace())
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, Convert(only(t, b.objs, "RoleBinding"), rb))
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.GetName()}, rb.RoleRef)
	assert.True(t, boundTo(rb.Subjects, sa, cpNamespace), "%s not bound to ServiceAccount %s/%s", role.GetName(), cpNamespace, sa)

	cluster, namespaced := rulesBoundTo(t, b.objs, sa, cpNamespace)
	cp, bs := controlplanev1.GroupVersion.Group, "bootstrap.cluster.x-k8s.io"
	// What the manager cannot run without.
	for _, want := range []struct{ group, resource, verb string }{
		{cp, "kairoscontrolplanes", "watch"},
		{cp, "kairoscontrolplanes", "patch"},
		{cp, "kairoscontrolplanes/status", "patch"},
		{cp, "kairoscontrolplanes/finalizers", "update"},
		{bs, "kairosconfigs", "create"},
		{bs, "kairosconfigs", "delete"},
		{bs, "kairosconfigtemplates", "get"},
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
	} {
		assert.True(t, allows(cluster, want.group, want.resource, want.verb), "manager may not %s %s.%s", want.verb, want.resource, want.group)
	}
	// --leader-elect: the Lease lives in the manager's namespace.
	for _, verb := range []string{"get", "create", "update"} {
		assert.True(t, allows(namespaced, "coordination.k8s.io", "leases", verb), "leader election needs leases %s in %s", verb, cpNamespace)
	}
	assert.False(t, allows(cluster, "coordination.k8s.io", "leases", "update"), "Lease access belongs in the namespaced Role, not cluster-wide")
}
