package clusterctl

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

// TestInit installs Cluster API and both Kairos providers of this tree (v0.2.0) with clusterctl init and
// checks what clusterctl recorded and created: the inventory, our CRDs with the contract and
// clusterctl labels, and for each provider a Deployment whose ServiceAccount, RBAC, webhook
// Service, webhook configurations and serving certificate are wired to each other.
func TestInit(t *testing.T) {
	m := startManagement(t, "management")
	components := m.init(t, m.initOptions(newVersion, false))
	if len(components) != 3 {
		t.Errorf("clusterctl init installed %d components, want 3", len(components))
	}

	t.Run("inventory", func(t *testing.T) {
		got := m.providers(t)
		want := []clusterctlv1.Provider{
			{ProviderName: "cluster-api", Type: string(clusterctlv1.CoreProviderType), Version: m.Repos.CoreVersion},
			{ProviderName: providerName, Type: string(bootstrapProvider.Type), Version: newVersion},
			{ProviderName: providerName, Type: string(controlPlaneProvider.Type), Version: newVersion},
		}
		want[0].Name, want[0].Namespace = "cluster-api", coreNamespace
		want[1].Name, want[1].Namespace = bootstrapProvider.Label, bootstrapProvider.Namespace
		want[2].Name, want[2].Namespace = controlPlaneProvider.Label, controlPlaneProvider.Namespace
		if len(got) != len(want) {
			t.Errorf("inventory has %d providers, want %d: %v", len(got), len(want), keys(got))
		}
		for _, w := range want {
			p, ok := got[w.Namespace+"/"+w.Name]
			if !ok {
				t.Errorf("no Provider %s/%s in the inventory: %v", w.Namespace, w.Name, keys(got))
				continue
			}
			if p.ProviderName != w.ProviderName || p.Type != w.Type || p.Version != w.Version {
				t.Errorf("Provider %s/%s: name %q type %q version %q, want %q %q %q",
					p.Namespace, p.Name, p.ProviderName, p.Type, p.Version, w.ProviderName, w.Type, w.Version)
			}
		}
	})

	t.Run("crds", func(t *testing.T) {
		for _, p := range []providerSpec{bootstrapProvider, controlPlaneProvider} {
			checkCRDs(t, m, p)
		}
	})

	for _, p := range []providerSpec{bootstrapProvider, controlPlaneProvider} {
		t.Run(p.Name, func(t *testing.T) { checkInstalledProvider(t, m, p, newVersion) })
	}
}

const contractVersion = "v1beta2"

// providerCRDs are the CRDs each provider installs.
var providerCRDs = map[string][]string{
	bootstrapProvider.Label:    {"kairosconfigs.bootstrap.cluster.x-k8s.io", "kairosconfigtemplates.bootstrap.cluster.x-k8s.io"},
	controlPlaneProvider.Label: {"kairoscontrolplanes.controlplane.cluster.x-k8s.io", "kairoscontrolplanetemplates.controlplane.cluster.x-k8s.io"},
}

// checkCRDs checks that a provider's CRDs are installed, established and labeled by
// clusterctl (which move relies on) and with the contract version (which Cluster API relies
// on).
func checkCRDs(t *testing.T, m *management, p providerSpec) {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := m.Client.List(context.Background(), list, client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, crd := range list.Items {
		found[crd.Name] = true
		for k, v := range map[string]string{
			clusterctlv1.ClusterctlLabel:                         "",
			clusterv1.ProviderNameLabel:                          p.Label,
			clusterv1.GroupVersion.Group + "/" + contractVersion: contractVersion,
		} {
			if got, ok := crd.Labels[k]; !ok || got != v {
				t.Errorf("CRD %s: label %s=%q, want %q", crd.Name, k, got, v)
			}
		}
		if !crdEstablished(&crd) {
			t.Errorf("CRD %s is not established", crd.Name)
		}
	}
	if len(found) != len(providerCRDs[p.Label]) {
		t.Errorf("%s installed CRDs %v, want %v", p.Label, keys(found), providerCRDs[p.Label])
	}
	for _, n := range providerCRDs[p.Label] {
		if !found[n] {
			t.Errorf("CRD %s of %s not installed (found %v)", n, p.Label, keys(found))
		}
	}
}

// checkInstalledProvider checks the objects clusterctl created for one provider.
func checkInstalledProvider(t *testing.T, m *management, p providerSpec, version string) {
	ctx := context.Background()
	c := m.Client
	inNS := client.InNamespace(p.Namespace)
	byLabel := client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}
	clusterctlLabels := func(kind string, o client.Object) {
		t.Helper()
		if _, ok := o.GetLabels()[clusterctlv1.ClusterctlLabel]; !ok {
			t.Errorf("%s %s has no %s label", kind, o.GetName(), clusterctlv1.ClusterctlLabel)
		}
	}

	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); err != nil {
		t.Fatalf("namespace %s: %v", p.Namespace, err)
	}
	clusterctlLabels("Namespace", ns)

	// The Deployment: one manager container with the released image and every variable
	// replaced by its default.
	deployments := &appsv1.DeploymentList{}
	if err := c.List(ctx, deployments, inNS, byLabel); err != nil {
		t.Fatal(err)
	}
	if len(deployments.Items) != 1 {
		t.Fatalf("%d Deployments of %s in %s, want 1", len(deployments.Items), p.Label, p.Namespace)
	}
	d := &deployments.Items[0]
	clusterctlLabels("Deployment", d)
	mc := managerContainer(d)
	if mc == nil {
		t.Fatalf("Deployment %s has no container named manager", d.Name)
	}
	rp, err := repo.Lookup(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := rp.ImageRepository + ":" + version; mc.Image != want {
		t.Errorf("manager image %s, want %s", mc.Image, want)
	}
	for _, a := range append([]string{mc.Image}, mc.Args...) {
		if strings.Contains(a, "${") {
			t.Errorf("manager container still has a variable after clusterctl init: %s", a)
		}
	}
	if !contains(mc.Args, "--leader-elect") {
		t.Errorf("manager args %v lack --leader-elect (one Deployment replica must lead)", mc.Args)
	}

	// Its ServiceAccount, bound to the provider's roles.
	saName := d.Spec.Template.Spec.ServiceAccountName
	sa := &corev1.ServiceAccount{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: saName}, sa); err != nil {
		t.Fatalf("ServiceAccount %s of the Deployment: %v", saName, err)
	}
	clusterctlLabels("ServiceAccount", sa)
	bindsSA := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == saName && s.Namespace == p.Namespace {
				return true
			}
		}
		return false
	}

	clusterRoles := &rbacv1.ClusterRoleList{}
	if err := c.List(ctx, clusterRoles, byLabel); err != nil {
		t.Fatal(err)
	}
	roleNames := map[string]bool{}
	for i := range clusterRoles.Items {
		clusterctlLabels("ClusterRole", &clusterRoles.Items[i])
		roleNames[clusterRoles.Items[i].Name] = true
	}
	bindings := &rbacv1.ClusterRoleBindingList{}
	if err := c.List(ctx, bindings, byLabel); err != nil {
		t.Fatal(err)
	}
	bound := 0
	for i := range bindings.Items {
		b := &bindings.Items[i]
		clusterctlLabels("ClusterRoleBinding", b)
		if !roleNames[b.RoleRef.Name] {
			t.Errorf("ClusterRoleBinding %s binds ClusterRole %s, which the provider does not install (has %v)", b.Name, b.RoleRef.Name, keys(roleNames))
		}
		if bindsSA(b.Subjects) {
			bound++
		}
	}
	if len(roleNames) == 0 || bound == 0 {
		t.Errorf("no ClusterRole bound to ServiceAccount %s/%s (ClusterRoles %v, bindings %d)", p.Namespace, saName, keys(roleNames), len(bindings.Items))
	}
	roleBindings := &rbacv1.RoleBindingList{}
	if err := c.List(ctx, roleBindings, inNS, byLabel); err != nil {
		t.Fatal(err)
	}
	leaderElection := false
	for i := range roleBindings.Items {
		b := &roleBindings.Items[i]
		role := &rbacv1.Role{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: b.RoleRef.Name}, role); err != nil {
			t.Errorf("RoleBinding %s: Role %s: %v", b.Name, b.RoleRef.Name, err)
			continue
		}
		for _, r := range role.Rules {
			if bindsSA(b.Subjects) && contains(r.APIGroups, "coordination.k8s.io") && contains(r.Resources, "leases") {
				leaderElection = true
			}
		}
	}
	if !leaderElection {
		t.Errorf("no Role in %s lets ServiceAccount %s hold a leader election Lease", p.Namespace, saName)
	}

	// The webhook Service selects the manager's pods and targets its webhook port; the
	// configurations call that Service, with the CA cert-manager injects from the Certificate
	// whose Secret the manager mounts.
	services := &corev1.ServiceList{}
	if err := c.List(ctx, services, inNS, byLabel); err != nil {
		t.Fatal(err)
	}
	servicesByName := map[string]*corev1.Service{}
	for i := range services.Items {
		s := &services.Items[i]
		servicesByName[s.Name] = s
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the manager pods %v", s.Name, s.Spec.Selector, d.Spec.Template.Labels)
		}
		for _, port := range s.Spec.Ports {
			if !containerHasPort(mc, port.TargetPort) {
				t.Errorf("Service %s targets port %s, which the manager container does not expose", s.Name, port.TargetPort.String())
			}
		}
	}
	var injectFrom []string
	checkClientConfig := func(config, hook string, cc admissionv1.WebhookClientConfig) {
		t.Helper()
		switch {
		case cc.Service == nil:
			t.Errorf("%s webhook %s calls no Service", config, hook)
		case cc.Service.Namespace != p.Namespace || servicesByName[cc.Service.Name] == nil:
			t.Errorf("%s webhook %s calls Service %s/%s, not one of the provider's", config, hook, cc.Service.Namespace, cc.Service.Name)
		}
	}
	mutating := &admissionv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mutating, byLabel); err != nil {
		t.Fatal(err)
	}
	validating := &admissionv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, validating, byLabel); err != nil {
		t.Fatal(err)
	}
	if len(mutating.Items) != 1 || len(validating.Items) != 1 {
		t.Errorf("%d mutating and %d validating webhook configurations, want 1 and 1", len(mutating.Items), len(validating.Items))
	}
	for i := range mutating.Items {
		w := &mutating.Items[i]
		clusterctlLabels("MutatingWebhookConfiguration", w)
		injectFrom = append(injectFrom, w.Annotations["cert-manager.io/inject-ca-from"])
		for _, h := range w.Webhooks {
			checkClientConfig(w.Name, h.Name, h.ClientConfig)
		}
	}
	for i := range validating.Items {
		w := &validating.Items[i]
		clusterctlLabels("ValidatingWebhookConfiguration", w)
		injectFrom = append(injectFrom, w.Annotations["cert-manager.io/inject-ca-from"])
		for _, h := range w.Webhooks {
			checkClientConfig(w.Name, h.Name, h.ClientConfig)
		}
	}
	for _, from := range injectFrom {
		ns, name, _ := strings.Cut(from, "/")
		if ns != p.Namespace {
			t.Errorf("webhook configuration injects its CA from %q, not from the provider's namespace", from)
			continue
		}
		cert := &unstructured.Unstructured{}
		cert.SetAPIVersion("cert-manager.io/v1")
		cert.SetKind("Certificate")
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cert); err != nil {
			t.Errorf("Certificate %s named by cert-manager.io/inject-ca-from: %v", from, err)
			continue
		}
		clusterctlLabels("Certificate", cert)
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		if !mountsSecret(d, mc, secretName) {
			t.Errorf("the manager does not mount Secret %s of Certificate %s (the webhook serving certificate)", secretName, from)
		}
		issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
		iss := &unstructured.Unstructured{}
		iss.SetAPIVersion("cert-manager.io/v1")
		iss.SetKind("Issuer")
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: issuer}, iss); err != nil {
			t.Errorf("Issuer %s of Certificate %s: %v", issuer, from, err)
		}
	}
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func containerHasPort(c *corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

func mountsSecret(d *appsv1.Deployment, c *corev1.Container, secretName string) bool {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secretName {
			continue
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name == v.Name {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
