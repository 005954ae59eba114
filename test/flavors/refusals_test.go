package flavors_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// requiredInReadme returns the variables config/templates/README.md documents as required
// (their default column starts with "required").
func requiredInReadme(t *testing.T) map[string]bool {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, repo.TemplatesDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\|\\s*`([A-Z][A-Z0-9_]*)`\\s*\\|\\s*required").FindAllSubmatch(data, -1) {
		out[string(m[1])] = true
	}
	return out
}

// A flavor rendered without one of its required variables fails, and clusterctl's error names
// the variable; the variables clusterctl requires are the ones the README documents as
// required.
func TestMissingRequiredVariable(t *testing.T) {
	documented := requiredInReadme(t)
	for _, flavor := range sortedFlavors() {
		t.Run(flavor, func(t *testing.T) {
			file := repo.TemplateFileName(flavor)
			ns := "missing-" + flavor
			if _, err := render(t, file, ns, repo.RequiredSamples()); err != nil {
				t.Fatalf("with every required variable: %v", err)
			}
			var required []string
			for name, def := range listVariables(t, file, ns) {
				if def == nil {
					required = append(required, name)
				}
			}
			sort.Strings(required)
			t.Logf("required: %s", strings.Join(required, ", "))
			for _, name := range required {
				if name == "CLUSTER_NAME" || name == "NAMESPACE" {
					continue // clusterctl's own arguments
				}
				if !documented[name] {
					t.Errorf("clusterctl requires %s, which config/templates/README.md does not document as required", name)
				}
				t.Run(name, func(t *testing.T) {
					without := repo.RequiredSamples()
					delete(without, name)
					_, err := render(t, file, ns, without)
					if err == nil {
						t.Fatalf("rendered without %s", name)
					}
					if !strings.Contains(err.Error(), name) {
						t.Errorf("the error does not name %s: %v", name, err)
					}
				})
			}
		})
	}
}

// The API server refuses what the providers' real schemas refuse, strictly: an unknown field
// fails (and would be silently dropped without strict validation), as do OpenAPI bounds,
// enums and CEL rules of the infrastructure CRDs.
func TestSchemasRefuse(t *testing.T) {
	type mutation func(t *testing.T, o *unstructured.Unstructured)
	setField := func(value any, path ...string) mutation {
		return func(t *testing.T, o *unstructured.Unstructured) {
			if err := unstructured.SetNestedField(o.Object, value, path...); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeField := func(path ...string) mutation {
		return func(t *testing.T, o *unstructured.Unstructured) { unstructured.RemoveNestedField(o.Object, path...) }
	}
	cases := []struct {
		name, flavor, kind, object string
		mutate                     mutation
		// want are substrings of the API server's error.
		want []string
		// unknownField cases pass without strict field validation (the field is pruned).
		unknownField bool
	}{
		{"unknown field in a VSphereMachineTemplate", "vsphere", "VSphereMachineTemplate", "control-plane",
			setField("x", "spec", "template", "spec", "notAField"), []string{`unknown field "spec.template.spec.notAField"`}, true},
		{"unknown field in the KairosControlPlane", "vsphere", "KairosControlPlane", "",
			setField("x", "spec", "notAField"), []string{`unknown field "spec.notAField"`}, true},
		{"unknown field deep in KubeVirt's VM template", "kubevirt", "KubevirtMachineTemplate", "md-0",
			setField("x", "spec", "template", "spec", "virtualMachineTemplate", "spec", "template", "spec", "domain", "notAField"),
			[]string{`unknown field "spec.template.spec.virtualMachineTemplate.spec.template.spec.domain.notAField"`}, true},
		{"unknown field in a ProxmoxCluster", "proxmox", "ProxmoxCluster", "",
			setField("x", "spec", "ipv4Config", "notAField"), []string{`unknown field "spec.ipv4Config.notAField"`}, true},
		{"empty vCenter thumbprint (minLength)", "vsphere", "VSphereCluster", "",
			setField("", "spec", "thumbprint"), []string{"spec.thumbprint"}, false},
		{"one vCPU (minimum 2)", "vsphere", "VSphereMachineTemplate", "md-0",
			setField(int64(1), "spec", "template", "spec", "numCPUs"), []string{"spec.template.spec.numCPUs"}, false},
		{"no VM template (required)", "vsphere", "VSphereMachineTemplate", "control-plane",
			removeField("spec", "template", "spec", "template"), []string{"spec.template.spec.template", "Required"}, false},
		{"unknown bootstrap check (enum)", "kubevirt", "KubevirtMachineTemplate", "control-plane",
			setField("maybe", "spec", "template", "spec", "virtualMachineBootstrapCheck", "checkStrategy"),
			[]string{"spec.template.spec.virtualMachineBootstrapCheck.checkStrategy", "Unsupported value"}, false},
		{"linked clone with a format (CEL)", "proxmox", "ProxmoxMachineTemplate", "control-plane",
			func(t *testing.T, o *unstructured.Unstructured) {
				setField(false, "spec", "template", "spec", "full")(t, o)
				setField("qcow2", "spec", "template", "spec", "format")(t, o)
			}, []string{"Must set full=true when specifying format"}, false},
		{"no IP configuration (CEL)", "proxmox", "ProxmoxCluster", "",
			removeField("spec", "ipv4Config"), []string{"at least one ip config must be set"}, false},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := framework.NewNamespace(t, env.Client, "refuse-")
			tmpl, err := render(t, repo.TemplateFileName(c.flavor), ns, repo.RequiredSamples())
			if err != nil {
				t.Fatal(err)
			}
			objs := tmpl.Objs()
			i := slices.IndexFunc(objs, func(o unstructured.Unstructured) bool {
				return o.GetKind() == c.kind && strings.Contains(o.GetName(), c.object)
			})
			if i < 0 {
				t.Fatalf("the %s flavor has no %s %q", c.flavor, c.kind, c.object)
			}
			o := objs[i].DeepCopy()
			if err := strict.Create(ctx, o.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("the object as rendered is refused: %v", err)
			}
			c.mutate(t, o)
			err = strict.Create(ctx, o.DeepCopy(), client.DryRunAll)
			if err == nil {
				t.Fatalf("the API server accepted %s %s", c.kind, o.GetName())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			t.Logf("refused: %v", err)
			if c.unknownField {
				// Without strict validation the API server would drop the field silently.
				if err := env.Client.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldValidation(metav1.FieldValidationIgnore)); err != nil {
					t.Errorf("without strict field validation: %v", err)
				}
			}
		})
	}
}
