package repo

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestComponentsOfBothProvidersFollowTheContract(t *testing.T) {
	for _, p := range []Provider{Bootstrap, ControlPlane} {
		t.Run(p.Name, func(t *testing.T) {
			data := components(t, p)
			vs, _ := CheckComponents(p, "v0.1.0", "", data)
			expectClean(t, vs)

			objs, err := ParseObjects(data)
			if err != nil {
				t.Fatal(err)
			}
			crds := 0
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					crds++
					// What the control-plane provider reads: the release on every CRD of the
					// provider, under the annotation its API module declares.
					if got := o.GetAnnotations()[p.ReleaseAnnotation]; got != "v0.1.0" {
						t.Errorf("%s: annotation %s is %q, want v0.1.0", o.GetName(), p.ReleaseAnnotation, got)
					}
				}
			}
			if crds < 2 {
				t.Errorf("want the provider's CRDs (object and template) in the components, got %d", crds)
			}
			if !strings.Contains(string(data), "${"+p.ImageVariable+":=ghcr.io/kairos-capi/") {
				t.Errorf("the manager image is not the %s variable", p.ImageVariable)
			}
		})
	}
}

// Every rule of CheckComponents fires on a components YAML broken in that one way, and the
// violation names the offending object.
func TestComponentsChecksFire(t *testing.T) {
	p := ControlPlane
	good := components(t, p)

	cases := []struct {
		name   string
		break_ func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured
		raw    func(string) string // instead of break_: edit the text
		rule   string
		object string
	}{
		{
			name: "no Namespace",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				return drop(objs, "Namespace", "")
			},
			rule: RuleOneNamespace,
		},
		{
			name: "two Namespaces",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				ns := first(t, objs, "Namespace", "").DeepCopy()
				ns.SetName("another")
				return append(objs, ns)
			},
			rule: RuleOneNamespace,
		},
		{
			name: "Service in another namespace",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				first(t, objs, "Service", "webhook").SetNamespace("default")
				return objs
			},
			rule: RuleTargetNamespace, object: "Service default/kairos-controlplane-webhook-service",
		},
		{
			name: "namespaced custom resource without namespace",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				first(t, objs, "Certificate", "").SetNamespace("")
				return objs
			},
			rule: RuleTargetNamespace, object: "Certificate kairos-controlplane-serving-cert",
		},
		{
			name: "CRD with a namespace",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				first(t, objs, "CustomResourceDefinition", "kairoscontrolplanes").SetNamespace("kairos-controlplane-system")
				return objs
			},
			rule: RuleTargetNamespace, object: "CustomResourceDefinition kairos-controlplane-system/kairoscontrolplanes",
		},
		{
			name: "RBAC subject in another namespace",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				crb := first(t, objs, "ClusterRoleBinding", "")
				subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
				subjects[0].(map[string]any)["namespace"] = "kube-system"
				set(t, crb, subjects, "subjects")
				return objs
			},
			rule: RuleTargetNamespace, object: "ClusterRoleBinding",
		},
		{
			name: "webhook calling a Service elsewhere",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				vwc := first(t, objs, "ValidatingWebhookConfiguration", "")
				hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
				if err := unstructured.SetNestedField(hooks[0].(map[string]any), "elsewhere", "clientConfig", "service", "namespace"); err != nil {
					t.Fatal(err)
				}
				set(t, vwc, hooks, "webhooks")
				return objs
			},
			rule: RuleTargetNamespace, object: "ValidatingWebhookConfiguration",
		},
		{
			name: "object without the provider label",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				relabel(first(t, objs, "ServiceAccount", ""), ProviderLabel, "")
				return objs
			},
			rule: RuleProviderLabel, object: "ServiceAccount kairos-controlplane-system/kairos-controlplane-manager",
		},
		{
			name: "object labelled for the other provider",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				relabel(first(t, objs, "ClusterRole", ""), ProviderLabel, Bootstrap.Label)
				return objs
			},
			rule: RuleProviderLabel, object: "ClusterRole",
		},
		{
			name: "manager container renamed",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				d := first(t, objs, "Deployment", "")
				containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
				containers[0].(map[string]any)["name"] = "controller"
				set(t, d, containers, "spec", "template", "spec", "containers")
				return objs
			},
			rule: RuleManagerContainer, object: "Deployment kairos-controlplane-system/kairos-controlplane-controller-manager",
		},
		{
			name: "no Deployment",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				return drop(objs, "Deployment", "")
			},
			rule: RuleManagerContainer,
		},
		{
			name: "manager image of another version",
			raw: func(s string) string {
				return strings.ReplaceAll(s, "kairos-controlplane-manager:v0.1.0", "kairos-controlplane-manager:dev")
			},
			rule: RuleManagerImage, object: "Deployment",
		},
		{
			name: "manager image without the variable",
			raw: func(s string) string {
				return strings.ReplaceAll(s, "${KAIROS_CONTROLPLANE_IMAGE:=ghcr.io/kairos-capi/kairos-controlplane-manager:v0.1.0}", "ghcr.io/kairos-capi/kairos-controlplane-manager:v0.1.0")
			},
			rule: RuleManagerImage, object: "Deployment",
		},
		{
			name: "CRD without the contract label",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				relabel(first(t, objs, "CustomResourceDefinition", "kairoscontrolplanetemplates"), ContractLabel, "")
				return objs
			},
			rule: RuleCRDContractLabel, object: "CustomResourceDefinition kairoscontrolplanetemplates.controlplane.cluster.x-k8s.io",
		},
		{
			name: "contract label naming a version the CRD does not serve",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				relabel(first(t, objs, "CustomResourceDefinition", "kairoscontrolplanes"), ContractLabel, "v1beta2_v1beta3")
				return objs
			},
			rule: RuleCRDContractLabel, object: "CustomResourceDefinition kairoscontrolplanes.controlplane.cluster.x-k8s.io",
		},
		{
			name: "CRD named other than Cluster API computes",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				first(t, objs, "CustomResourceDefinition", "kairoscontrolplanes").SetName("kcps.controlplane.cluster.x-k8s.io")
				return objs
			},
			rule: RuleCRDName, object: "CustomResourceDefinition kcps.controlplane.cluster.x-k8s.io",
		},
		{
			name: "CRD without the release annotation",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				crd := first(t, objs, "CustomResourceDefinition", "kairoscontrolplanetemplates")
				annotations := crd.GetAnnotations()
				delete(annotations, ControlPlane.ReleaseAnnotation)
				crd.SetAnnotations(annotations)
				return objs
			},
			rule: RuleCRDReleaseAnnotation, object: "CustomResourceDefinition kairoscontrolplanetemplates.controlplane.cluster.x-k8s.io",
		},
		{
			name: "CRD annotated with another release",
			raw: func(s string) string {
				return strings.Replace(s, ControlPlane.ReleaseAnnotation+": v0.1.0", ControlPlane.ReleaseAnnotation+": v0.0.9", 1)
			},
			rule: RuleCRDReleaseAnnotation, object: "CustomResourceDefinition",
		},
		{
			name: "CRD with the other provider's release annotation only",
			raw: func(s string) string {
				return strings.Replace(s, ControlPlane.ReleaseAnnotation+": v0.1.0", Bootstrap.ReleaseAnnotation+": v0.1.0", 1)
			},
			rule: RuleCRDReleaseAnnotation, object: "CustomResourceDefinition",
		},
		{
			name: "lower-case variable",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${log_level:=2}", 1)
			},
			rule: RuleVariableSyntax,
		},
		{
			name: "variable with blanks",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${ KAIROS_CONTROLPLANE_LOG_LEVEL }", 1)
			},
			rule: RuleVariableSyntax,
		},
		{
			name: "other envsubst function",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${KAIROS_CONTROLPLANE_LOG_LEVEL:-2}", 1)
			},
			rule: RuleVariableSyntax,
		},
		{
			name: "$$ escape",
			raw:  func(s string) string { return strings.Replace(s, "--leader-elect", "--leader-elect=$$", 1) },
			rule: RuleVariableSyntax,
		},
		{
			name: "unterminated variable",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2", 1)
			},
			rule: RuleVariableSyntax,
		},
		{
			name: "variable without default",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${KAIROS_CONTROLPLANE_LOG_LEVEL}", 1)
			},
			rule: RuleVariableDefault,
		},
		{
			name: "empty default",
			raw: func(s string) string {
				return strings.Replace(s, "${KAIROS_CONTROLPLANE_LOG_LEVEL:=2}", "${KAIROS_CONTROLPLANE_LOG_LEVEL:=}", 1)
			},
			rule: RuleVariableSyntax,
		},
		{
			name: "two defaults for one variable",
			raw: func(s string) string {
				return strings.Replace(s, "--leader-elect", "--leader-elect=true\n        - --feature-gates=MachinePool=${EXP_MACHINE_POOL:=false}", 1)
			},
			rule: RuleVariableDefault,
		},
		{
			name: "duplicate object",
			break_: func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
				return append(objs, first(t, objs, "Role", "").DeepCopy())
			},
			rule: RuleDuplicateObject, object: "Role kairos-controlplane-system/",
		},
		{
			name: "not YAML objects",
			raw:  func(s string) string { return s + "\n---\nkind: ConfigMap\n" },
			rule: RuleYAML,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var broken []byte
			if c.raw != nil {
				broken = []byte(c.raw(string(good)))
				if string(broken) == string(good) {
					t.Fatal("the edit changed nothing: the test no longer matches the components")
				}
			} else {
				broken = mutate(t, good, func(objs []*unstructured.Unstructured) []*unstructured.Unstructured { return c.break_(t, objs) })
			}
			vs, _ := CheckComponents(p, "v0.1.0", "", broken)
			expectRule(t, vs, c.rule, c.object)
		})
	}
}

func TestComponentsWarnAboutAManagerCommandOutsideTheImage(t *testing.T) {
	data := mutate(t, components(t, Bootstrap), func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		d := first(t, objs, "Deployment", "")
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		containers[0].(map[string]any)["command"] = []any{"/manager"}
		set(t, d, containers, "spec", "template", "spec", "containers")
		return objs
	})
	vs, warnings := CheckComponents(Bootstrap, "v0.1.0", "", data)
	expectClean(t, vs)
	if len(warnings) != 1 || !strings.Contains(warnings[0], Bootstrap.ImageEntrypoint) {
		t.Errorf("want one warning naming %s, got %q", Bootstrap.ImageEntrypoint, warnings)
	}

	data = mutate(t, data, func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		d := first(t, objs, "Deployment", "")
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		delete(containers[0].(map[string]any), "command")
		set(t, d, containers, "spec", "template", "spec", "containers")
		return objs
	})
	if _, warnings := CheckComponents(Bootstrap, "v0.1.0", "", data); len(warnings) != 0 {
		t.Errorf("no command runs the image's entrypoint, want no warning, got %q", warnings)
	}
}

func TestImageRepositoryOverride(t *testing.T) {
	const repo = "registry.example.com/kairos/bootstrap"
	data, err := BuildProviderComponents(root(t), Bootstrap, repo, "v0.3.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "image: ${KAIROS_BOOTSTRAP_IMAGE:="+repo+":v0.3.1}") {
		t.Error("the image repository override is not in the components")
	}
	vs, _ := CheckComponents(Bootstrap, "v0.3.1", repo, data)
	expectClean(t, vs)
	vs, _ = CheckComponents(Bootstrap, "v0.3.1", "", data)
	expectRule(t, vs, RuleManagerImage, "Deployment")
}

func drop(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && strings.Contains(o.GetName(), name) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// relabel sets label key of o to value, or removes it when value is empty.
func relabel(o *unstructured.Unstructured, key, value string) {
	labels := o.GetLabels()
	if value == "" {
		delete(labels, key)
	} else {
		labels[key] = value
	}
	o.SetLabels(labels)
}
