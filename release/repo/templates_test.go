package repo

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var (
	templatesOnce  sync.Once
	templatesFiles map[string][]byte
	templatesVs    []Violation
	templatesErr   error
	documentedOnce = sync.OnceValues(func() ([]byte, error) {
		wd, _ := os.Getwd()
		r, err := FindRoot(wd)
		if err != nil {
			return nil, err
		}
		return os.ReadFile(filepath.Join(r, TemplatesDir, "README.md"))
	})
)

func templates(t *testing.T) map[string][]byte {
	t.Helper()
	templatesOnce.Do(func() { templatesFiles, templatesVs, templatesErr = BuildTemplates(root(t)) })
	if templatesErr != nil {
		t.Fatal(templatesErr)
	}
	return templatesFiles
}

func documented(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := documentedOnce()
	if err != nil {
		t.Fatal(err)
	}
	return DocumentedVariables(readme)
}

func TestTemplatesFollowTheContract(t *testing.T) {
	files := templates(t)
	expectClean(t, templatesVs)
	for _, f := range RequiredFlavors {
		if _, ok := files[TemplateFileName(f)]; !ok {
			t.Errorf("flavor %s was not built", f)
		}
	}

	kinds := func(name string) map[string]int {
		objs, err := ParseObjects(files[name])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, o := range objs {
			out[o.GetKind()]++
		}
		return out
	}
	if k := kinds("cluster-template-ha.yaml"); k["MachineHealthCheck"] != 1 {
		t.Errorf("ha flavor: want a MachineHealthCheck, got kinds %v", k)
	}
	cc := kinds("cluster-template-clusterclass.yaml")
	for _, kind := range []string{"ClusterClass", "Cluster", "KairosControlPlaneTemplate", "KairosConfigTemplate", "Secret",
		"${KAIROS_INFRA_CLUSTER_TEMPLATE_KIND:=KairosSimClusterTemplate}", "${KAIROS_INFRA_MACHINE_TEMPLATE_KIND:=KairosSimMachineTemplate}"} {
		if cc[kind] == 0 {
			t.Errorf("clusterclass flavor has no %s (kinds %v)", kind, cc)
		}
	}
	if cc["KairosControlPlane"] != 0 || cc["MachineDeployment"] != 0 {
		t.Errorf("clusterclass flavor: the topology creates the control plane and workers, got kinds %v", cc)
	}
	if !strings.Contains(string(files["cluster-template-k3s.yaml"]), "distribution: k3s") ||
		strings.Contains(string(files["cluster-template-k3s.yaml"]), "KAIROS_DISTRIBUTION") {
		t.Error("k3s flavor: want distribution fixed to k3s")
	}
	if !strings.Contains(string(files["cluster-template.yaml"]), "${KAIROS_DISTRIBUTION:=k0s}") {
		t.Error("default flavor: want ${KAIROS_DISTRIBUTION:=k0s}")
	}
	if !strings.Contains(string(files["cluster-template.yaml"]), "kind: ${KAIROS_INFRA_CLUSTER_KIND:=KairosSimCluster}") {
		t.Error("default flavor: want the infrastructure kinds as variables defaulting to KairosSim*")
	}

	// Every required flavor names its infrastructure; the infrastructure flavors hold their
	// provider's kinds and nothing of the sandbox's.
	for _, f := range RequiredFlavors {
		infra, ok := FlavorInfrastructure[f]
		if !ok {
			t.Errorf("flavor %s has no entry in FlavorInfrastructure", f)
			continue
		}
		if infra.Name == SandboxInfrastructure.Name {
			continue
		}
		data := string(files[TemplateFileName(f)])
		k := kinds(TemplateFileName(f))
		if k[infra.ClusterKind] != 1 || k[infra.MachineTemplateKind] != 2 || k["KairosControlPlane"] != 1 || k["MachineDeployment"] != 1 {
			t.Errorf("%s flavor: want one %s, two %s (control plane, workers), one KairosControlPlane and one MachineDeployment, got kinds %v",
				f, infra.ClusterKind, infra.MachineTemplateKind, k)
		}
		for _, s := range []string{"KairosSim", "KAIROS_INFRA_", "InfrastructureCluster", "InfrastructureMachineTemplate"} {
			if strings.Contains(data, s) {
				t.Errorf("%s flavor contains %q", f, s)
			}
		}
		if !strings.Contains(data, "${KAIROS_DISTRIBUTION:=k0s}") {
			t.Errorf("%s flavor: want k0s by default and KAIROS_DISTRIBUTION for k3s", f)
		}
	}
	if got := SandboxFlavors(); strings.Join(got, ",") != "clusterclass,default,ha,k3s" {
		t.Errorf("sandbox flavors %v", got)
	}
}

func TestEveryDocumentedVariableIsUsed(t *testing.T) {
	files := templates(t)
	used := map[string]bool{}
	for _, data := range files {
		vars, _ := ScanVariables(string(data))
		for _, v := range vars {
			used[v.Name] = true
		}
	}
	for name := range documented(t) {
		if !used[name] {
			t.Errorf("config/templates/README.md documents %s, which no template uses", name)
		}
	}
}

// Every template rule fires on a template broken in that one way.
func TestTemplateChecksFire(t *testing.T) {
	files := templates(t)
	doc := documented(t)
	def := files["cluster-template.yaml"]
	ha := files["cluster-template-ha.yaml"]
	cc := files["cluster-template-clusterclass.yaml"]
	vsphere := files["cluster-template-vsphere.yaml"]

	edit := func(data []byte, fn func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			return mutate(t, data, func(objs []*unstructured.Unstructured) []*unstructured.Unstructured { return fn(t, objs) })
		}
	}
	replace := func(data []byte, old, new string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			out := strings.Replace(string(data), old, new, 1)
			if out == string(data) {
				t.Fatalf("%q is not in the template any more", old)
			}
			return []byte(out)
		}
	}

	cases := []struct {
		name   string
		flavor string
		data   func(t *testing.T) []byte
		rule   string
		object string
	}{
		{"hard-coded namespace", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			first(t, objs, "MachineDeployment", "").SetNamespace("default")
			return objs
		}), RuleTemplateNamespace, "MachineDeployment default/${CLUSTER_NAME}-md-0"},
		{"a Namespace object", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			ns := &unstructured.Unstructured{}
			ns.SetAPIVersion("v1")
			ns.SetKind("Namespace")
			ns.SetName("${NAMESPACE}")
			return append(objs, ns)
		}), RuleTemplateNamespace, "Namespace ${NAMESPACE}"},
		{"Cluster not named CLUSTER_NAME", "default", replace(def, "kind: Cluster\nmetadata:\n  name: \"${CLUSTER_NAME}\"", "kind: Cluster\nmetadata:\n  name: my-cluster"),
			RuleTemplateCluster, "Cluster ${NAMESPACE}/my-cluster"},
		{"two Clusters", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			c := first(t, objs, "Cluster", "").DeepCopy()
			c.SetName("${CLUSTER_NAME}-2")
			return append(objs, c)
		}), RuleTemplateCluster, ""},
		{"clusterName of another cluster", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "MachineDeployment", ""), "other", "spec", "clusterName")
			return objs
		}), RuleTemplateCluster, "MachineDeployment ${NAMESPACE}/${CLUSTER_NAME}-md-0"},
		{"reference to an object outside the template", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return drop(objs, "KairosConfigTemplate", "")
		}), RuleTemplateReference, "MachineDeployment ${NAMESPACE}/${CLUSTER_NAME}-md-0"},
		{"Secret outside the template", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return drop(objs, "Secret", "")
		}), RuleTemplateReference, "KairosControlPlane ${NAMESPACE}/${CLUSTER_NAME}-control-plane"},
		{"ClusterClass outside the template", "clusterclass", edit(cc, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return drop(objs, "ClusterClass", "")
		}), RuleTemplateReference, "Cluster ${NAMESPACE}/${CLUSTER_NAME}"},
		{"ClusterClass template outside the template", "clusterclass", edit(cc, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return drop(objs, "KairosControlPlaneTemplate", "")
		}), RuleTemplateReference, "ClusterClass"},
		{"undocumented variable", "default", replace(def, "replicas: ${WORKER_MACHINE_COUNT:=0}", "replicas: ${KAIROS_WORKERS:=0}"),
			RuleTemplateVariables, ""},
		{"required variable without a sample", "default", replace(def, "version: ${KUBERNETES_VERSION}\n---", "version: ${KAIROS_K8S_VERSION}\n---"),
			RuleTemplateVariables, ""},
		{"unknown field", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "KairosControlPlane", ""), int64(3), "spec", "replica")
			return objs
		}), RuleTemplateSchema, "KairosControlPlane ${NAMESPACE}/${CLUSTER_NAME}-control-plane"},
		{"Cluster API field of the old API", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "Cluster", ""), "v1beta1", "spec", "infrastructureRef", "apiVersion")
			return objs
		}), RuleTemplateSchema, "Cluster ${NAMESPACE}/${CLUSTER_NAME}"},
		{"value the Kairos API refuses", "default", replace(def, "userPasswordSecretRef:\n      name: ${KAIROS_USER_PASSWORD_SECRET_NAME:=${CLUSTER_NAME}-kairos-login}",
			"userPasswordSecretRef:\n      name: ${KAIROS_USER_PASSWORD_SECRET_NAME:=${CLUSTER_NAME}-kairos-login}\n    userPassword: inline"),
			RuleTemplateSchema, "KairosControlPlane"},
		{"value of the wrong type", "default", replace(def, "sshPublicKey: ${KAIROS_SSH_PUBLIC_KEY:=\"\"}", "sshPublicKey: [${KAIROS_SSH_PUBLIC_KEY:=\"\"}]"),
			RuleTemplateSchema, "KairosControlPlane"},
		{"value that breaks once a variable is set", "default", replace(def, "githubUser: ${KAIROS_GITHUB_USER:=\"\"}", "githubUser: ${KAIROS_SSH_PUBLIC_KEY:=\"\"}"),
			RuleTemplateSchema, "KairosControlPlane"},
		{"ha without MachineHealthCheck", "ha", edit(ha, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return drop(objs, "MachineHealthCheck", "")
		}), RuleTemplateHealthCheck, ""},
		{"ha MachineHealthCheck for the workers", "ha", edit(ha, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "MachineHealthCheck", ""), map[string]any{"cluster.x-k8s.io/deployment-name": "${CLUSTER_NAME}-md-0"}, "spec", "selector", "matchLabels")
			return objs
		}), RuleTemplateHealthCheck, ""},
		{"ha with an even control plane", "ha", replace(ha, "${KAIROS_HA_CONTROL_PLANE_MACHINE_COUNT:=3}", "${KAIROS_HA_CONTROL_PLANE_MACHINE_COUNT:=2}"),
			RuleTemplateHealthCheck, "KairosControlPlane"},
		{"variable with blanks", "default", replace(def, "${WORKER_MACHINE_COUNT:=0}", "${ WORKER_MACHINE_COUNT }"), RuleVariableSyntax, ""},
		{"variable written two ways", "default", replace(def, "version: ${KUBERNETES_VERSION}", "version: ${KUBERNETES_VERSION:=v1.31.2}"), RuleVariableDefault, ""},
		{"duplicate object", "default", edit(def, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			return append(objs, first(t, objs, "MachineDeployment", "").DeepCopy())
		}), RuleDuplicateObject, "MachineDeployment"},
		{"another provider's kind in an infrastructure flavor", "vsphere", replace(vsphere, "kind: VSphereCluster\nmetadata:", "kind: ProxmoxCluster\nmetadata:"),
			RuleTemplateInfrastructure, "ProxmoxCluster ${NAMESPACE}/${CLUSTER_NAME}"},
		{"infrastructure kind at another API version", "vsphere", edit(vsphere, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			first(t, objs, "VSphereCluster", "").SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta1")
			return objs
		}), RuleTemplateInfrastructure, "VSphereCluster ${NAMESPACE}/${CLUSTER_NAME}"},
		{"workers referring to the cluster kind", "vsphere", edit(vsphere, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "MachineDeployment", ""), "VSphereCluster", "spec", "template", "spec", "infrastructureRef", "kind")
			return objs
		}), RuleTemplateInfrastructure, "MachineDeployment ${NAMESPACE}/${CLUSTER_NAME}-md-0"},
		{"placeholder kind left (kairos.yaml patch forgotten)", "vsphere", edit(vsphere, func(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			set(t, first(t, objs, "KairosControlPlane", ""), "InfrastructureMachineTemplate", "spec", "machineTemplate", "spec", "infrastructureRef", "kind")
			return objs
		}), RuleTemplateInfrastructure, "KairosControlPlane ${NAMESPACE}/${CLUSTER_NAME}-control-plane"},
		{"sandbox variable in an infrastructure flavor", "vsphere", replace(vsphere, "kind: VSphereCluster\n    name: \"${CLUSTER_NAME}\"",
			"kind: ${KAIROS_INFRA_CLUSTER_KIND:=VSphereCluster}\n    name: \"${CLUSTER_NAME}\""), RuleTemplateInfrastructure, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := doc
			if c.name == "required variable without a sample" {
				// Documented, so that only the missing sample is wrong.
				d = map[string]bool{"KAIROS_K8S_VERSION": true}
				for k := range doc {
					d[k] = true
				}
			}
			vs := CheckTemplate(TemplateFileName(c.flavor), c.flavor, c.data(t), d)
			expectRule(t, vs, c.rule, c.object)
		})
	}
}

func TestMissingFlavor(t *testing.T) {
	tmp := t.TempDir()
	copyTree(t, root(t), tmp, TemplatesDir)
	if err := os.RemoveAll(filepath.Join(tmp, TemplatesDir, "flavors", "ha")); err != nil {
		t.Fatal(err)
	}
	_, vs, err := BuildTemplates(tmp)
	if err != nil {
		t.Fatal(err)
	}
	expectRule(t, vs, RuleTemplateFlavors, "")
}

// A flavor folder whose infrastructure the release module does not know is refused: the
// tests that apply every flavor to its provider's CRDs would not know what to install.
func TestFlavorWithoutInfrastructure(t *testing.T) {
	tmp := t.TempDir()
	copyTree(t, root(t), tmp, TemplatesDir)
	if err := os.Rename(filepath.Join(tmp, TemplatesDir, "flavors", "vsphere"), filepath.Join(tmp, TemplatesDir, "flavors", "vsphere-custom")); err != nil {
		t.Fatal(err)
	}
	_, vs, err := BuildTemplates(tmp)
	if err != nil {
		t.Fatal(err)
	}
	expectRule(t, vs, RuleTemplateFlavors, "")
	found := false
	for _, v := range vs {
		found = found || v.Rule == RuleTemplateFlavors && strings.Contains(v.Message, "vsphere-custom") && strings.Contains(v.Message, "FlavorInfrastructure")
	}
	if !found {
		t.Errorf("no violation names the flavor and FlavorInfrastructure: %v", vs)
	}
}

func TestScanVariables(t *testing.T) {
	vars, problems := ScanVariables("a: ${A}\nb: ${B:=${A}-x}\nc: ${C:=\"\"}\nd: $HOME and $(VAR) stay\n")
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	got := []string{}
	for _, v := range vars {
		got = append(got, v.String())
	}
	want := "${A} ${B:=${A}-x} ${A} ${C:=\"\"}"
	if strings.Join(got, " ") != want {
		t.Errorf("got %s, want %s", strings.Join(got, " "), want)
	}
	if vars[1].Line != 2 || vars[3].Line != 3 {
		t.Errorf("lines: %+v", vars)
	}
	set, problems := Summarize(vars)
	if len(problems) != 0 || strings.Join(set.Required, ",") != "A" || set.Optional["B"] != "${A}-x" || set.Optional["C"] != `""` {
		t.Errorf("summary %+v, problems %v", set, problems)
	}
	out, err := Substitute("b: ${B:=${A}-x}\nc: ${C:=\"\"}", map[string]string{"A": "a"})
	if err != nil || out != "b: a-x\nc: \"\"" {
		t.Errorf("Substitute = %q, %v", out, err)
	}
}
