package repo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	kcvalidation "github.com/kairos-capi/kairos-capi/common/provider/validation"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	kcpvalidation "github.com/kairos-capi/kairos-capi/controlplane/validation"
)

// TemplatesDir holds the cluster templates, relative to the repository root: one
// kustomization per flavor under flavors/, documented in README.md.
const TemplatesDir = "config/templates"

// RequiredFlavors are the flavors every control-plane release ships; "default" is
// cluster-template.yaml. default, k3s, ha and clusterclass are the sandbox's (simulated
// infrastructure); the others are for real infrastructure providers (FlavorInfrastructure).
var RequiredFlavors = []string{"default", "k3s", "ha", "clusterclass", "vsphere", "metal3", "kubevirt", "proxmox"}

// haFlavors must run a highly available control plane with a MachineHealthCheck.
var haFlavors = map[string]bool{"ha": true}

// TemplateFileName is the file name clusterctl expects for a flavor.
func TemplateFileName(flavor string) string {
	if flavor == "default" {
		return "cluster-template.yaml"
	}
	return "cluster-template-" + flavor + ".yaml"
}

// The values the checks give to required template variables. NAMESPACE and CLUSTER_NAME are
// kept symbolic in the structural checks so that messages show ${CLUSTER_NAME}-... names.
// The infrastructure samples are values the providers' own CRDs accept (test/flavors applies
// the flavors with them).
var (
	requiredSamples = map[string]string{
		"CLUSTER_NAME":         "release-check",
		"NAMESPACE":            "release-check",
		"KUBERNETES_VERSION":   "v1.31.2",
		"KAIROS_USER_PASSWORD": "release-check-password",
		// vsphere, metal3, proxmox
		"CONTROL_PLANE_ENDPOINT_IP": "10.0.0.10",
		// vsphere
		"VSPHERE_SERVER":         "vcenter.example.com",
		"VSPHERE_TLS_THUMBPRINT": "01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67",
		"VSPHERE_DATACENTER":     "DC0",
		"VSPHERE_DATASTORE":      "datastore1",
		"VSPHERE_FOLDER":         "/DC0/vm/kairos",
		"VSPHERE_RESOURCE_POOL":  "/DC0/host/cluster0/Resources",
		"VSPHERE_NETWORK":        "VM Network",
		"VSPHERE_TEMPLATE":       "kairos-ubuntu-24.04-k0s-v1.31.2",
		// metal3
		"IMAGE_URL":      "http://172.22.0.1/images/kairos-k0s.raw",
		"IMAGE_CHECKSUM": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		// kubevirt
		"NODE_VM_IMAGE_TEMPLATE": "registry.example.com/kairos/kubevirt-k0s:v1.31.2",
		// proxmox
		"PROXMOX_SOURCENODE": "pve1",
		"TEMPLATE_VMID":      "9000",
		"NODE_IP_RANGES":     "[10.0.0.100-10.0.0.120]",
		"IP_PREFIX":          "24",
		"GATEWAY":            "10.0.0.1",
		"DNS_SERVERS":        "[10.0.0.1, 9.9.9.9]",
		"BRIDGE":             "vmbr0",
	}
	// optionalSamples set every optional variable too, with values that must survive the
	// substitution (an SSH key has blanks, a crypt hash has $).
	optionalSamples = map[string]string{
		"CONTROL_PLANE_MACHINE_COUNT":           "3",
		"WORKER_MACHINE_COUNT":                  "2",
		"KAIROS_HA_CONTROL_PLANE_MACHINE_COUNT": "5",
		"KAIROS_DISTRIBUTION":                   "k3s",
		"KAIROS_VRRP_ROUTER_ID":                 "77",
		"KAIROS_SSH_PUBLIC_KEY":                 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHjc1LVfPtZeMfgtSgXPAmVlaItjtq8fovRIRYDR4K/o release@check",
		"KAIROS_GITHUB_USER":                    "octocat",
		"KAIROS_USER_PASSWORD_SECRET_NAME":      "release-check-login",
		"CLUSTER_CLASS_NAME":                    "release-check-class",
		"KAIROS_USER_PASSWORD":                  "$6$rounds=4096$saltsalt$0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ./0123456789abcdefgh",
		"CONTROL_PLANE_ENDPOINT_PORT":           "443",
		"VSPHERE_CLONE_MODE":                    "linkedClone",
		"VSPHERE_CONTROL_PLANE_NUM_CPUS":        "4",
		"VSPHERE_CONTROL_PLANE_MEMORY_MIB":      "8192",
		"VSPHERE_WORKER_NUM_CPUS":               "8",
		"VSPHERE_WORKER_MEMORY_MIB":             "16384",
		"VSPHERE_DISK_GIB":                      "80",
		"IMAGE_CHECKSUM_TYPE":                   "sha512",
		"IMAGE_FORMAT":                          "qcow2",
		"KUBEVIRT_CONTROL_PLANE_SERVICE_TYPE":   "LoadBalancer",
		"KUBEVIRT_CONTROL_PLANE_CPU_CORES":      "4",
		"KUBEVIRT_CONTROL_PLANE_MEMORY":         "8Gi",
		"KUBEVIRT_WORKER_CPU_CORES":             "8",
		"KUBEVIRT_WORKER_MEMORY":                "16Gi",
		"ALLOWED_NODES":                         "[pve1, pve2]",
		"NUM_SOCKETS":                           "2",
		"NUM_CORES":                             "4",
		"MEMORY_MIB":                            "8192",
		"BOOT_VOLUME_DEVICE":                    "virtio0",
		"BOOT_VOLUME_SIZE":                      "80",
	}
)

// RequiredSamples returns the values the checks give to the templates' required variables
// (a copy): every required variable of every shipped flavor has one.
func RequiredSamples() map[string]string { return copyMap(requiredSamples) }

// AllSamples returns RequiredSamples plus a value for every optional variable the checks
// set, chosen to differ from the defaults (KAIROS_DISTRIBUTION is k3s).
func AllSamples() map[string]string {
	out := copyMap(optionalSamples)
	for k, v := range requiredSamples {
		out[k] = v
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var documentedVariable = regexp.MustCompile("(?m)^\\|\\s*`([A-Z][A-Z0-9_]*)`")

// DocumentedVariables returns the variables listed in the first column of the tables of
// config/templates/README.md.
func DocumentedVariables(readme []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range documentedVariable.FindAllSubmatch(readme, -1) {
		out[string(m[1])] = true
	}
	return out
}

// BuildTemplates builds every flavor of config/templates with kustomize and checks it. It
// returns the cluster templates by file name.
func BuildTemplates(root string) (map[string][]byte, []Violation, error) {
	dir := filepath.Join(root, TemplatesDir)
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the template documentation: %w", err)
	}
	documented := DocumentedVariables(readme)

	entries, err := os.ReadDir(filepath.Join(dir, "flavors"))
	if err != nil {
		return nil, nil, fmt.Errorf("listing the flavors: %w", err)
	}
	var out violations
	files := map[string][]byte{}
	present := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		flavor := e.Name()
		present[flavor] = true
		checkFlavorInfrastructure(&out, flavor, filepath.Join(TemplatesDir, "flavors", flavor))
		data, err := Kustomize(filepath.Join(dir, "flavors", flavor))
		if err != nil {
			return nil, nil, err
		}
		name := TemplateFileName(flavor)
		files[name] = data
		out = append(out, CheckTemplate(name, flavor, data, documented)...)
	}
	for _, f := range RequiredFlavors {
		if !present[f] {
			out.add(RuleTemplateFlavors, filepath.Join(TemplatesDir, "flavors", f), "", "flavor %q is missing: the release ships %s", f, TemplateFileName(f))
		}
	}
	return files, out, nil
}

// CheckTemplate checks one cluster template: the clusterctl contract (one namespace,
// variables, every referenced object included) and that its objects are valid.
func CheckTemplate(file, flavor string, data []byte, documented map[string]bool) []Violation {
	var out violations
	text := string(data)

	vars, problems := ScanVariables(text)
	for _, p := range problems {
		out.add(RuleVariableSyntax, file, "", "%s", p)
	}
	set, problems := Summarize(vars)
	for _, p := range problems {
		out.add(RuleVariableDefault, file, "", "%s", p)
	}
	names := append([]string{}, set.Required...)
	for n := range set.Optional {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !documented[n] {
			out.add(RuleTemplateVariables, file, "", "${%s} is not documented in %s/README.md", n, TemplatesDir)
		}
	}
	for _, n := range set.Required {
		if _, ok := requiredSamples[n]; !ok {
			out.add(RuleTemplateVariables, file, "", "${%s} is required (no default) but the release checks have no sample value for it: give it a default, or add it to requiredSamples in release/repo/templates.go", n)
		}
	}
	if len(out) > 0 {
		// The structural checks below substitute variables; with broken syntax they would
		// only add noise.
		return out
	}

	// Structural checks, with CLUSTER_NAME and NAMESPACE left as written.
	symbolic := map[string]string{}
	for k, v := range requiredSamples {
		symbolic[k] = v
	}
	symbolic["CLUSTER_NAME"] = "${CLUSTER_NAME}"
	symbolic["NAMESPACE"] = "${NAMESPACE}"
	symbolicObjs, ok := substituteAndParse(&out, file, text, symbolic, "")
	if !ok {
		return out
	}
	checkTemplateStructure(&out, file, flavor, symbolicObjs)

	// Schema and validation, once with the defaults and once with every variable set.
	all := AllSamples()
	for _, pass := range []struct {
		label  string
		values map[string]string
	}{{"with default values", requiredSamples}, {"with every variable set", all}} {
		objs, ok := substituteAndParse(&out, file, text, pass.values, pass.label)
		if !ok {
			continue
		}
		names := make([]string, len(objs))
		for i, o := range objs {
			// Name objects as written (${CLUSTER_NAME}-...); the documents are in the same order.
			names[i] = objectName(o)
			if len(objs) == len(symbolicObjs) {
				names[i] = objectName(symbolicObjs[i])
			}
			checkTemplateSchema(&out, file, pass.label, names[i], o)
		}
		if pass.label == "with default values" {
			checkTemplateInfrastructure(&out, file, flavor, objs, names, set)
			if haFlavors[flavor] {
				checkHAReplicas(&out, file, objs)
			}
		}
	}
	return out
}

func substituteAndParse(out *violations, file, text string, values map[string]string, label string) ([]*unstructured.Unstructured, bool) {
	substituted, err := Substitute(text, values)
	if err != nil {
		out.add(RuleVariableSyntax, file, "", "substituting the variables: %v", err)
		return nil, false
	}
	objs, err := ParseObjects([]byte(substituted))
	if err != nil {
		if label != "" {
			out.add(RuleYAML, file, "", "%s, the template is not valid YAML any more: %v", label, err)
		} else {
			out.add(RuleYAML, file, "", "%v", err)
		}
		return nil, false
	}
	return objs, true
}

type objectKey struct{ group, kind, name string }

func keyOf(o *unstructured.Unstructured) objectKey {
	return objectKey{o.GroupVersionKind().Group, o.GetKind(), o.GetName()}
}

func checkTemplateStructure(out *violations, file, flavor string, objs []*unstructured.Unstructured) {
	index := map[objectKey]bool{}
	seen := map[string]bool{}
	clusters := 0
	for _, o := range objs {
		name := objectName(o)
		if seen[name] {
			out.add(RuleDuplicateObject, file, name, "appears more than once")
		}
		seen[name] = true
		index[keyOf(o)] = true
		if clusterScopedKinds[o.GetKind()] {
			out.add(RuleTemplateNamespace, file, name, "is cluster-scoped: a cluster template holds only objects of the target namespace (and assumes the namespace exists)")
			continue
		}
		if o.GetNamespace() != "${NAMESPACE}" {
			out.add(RuleTemplateNamespace, file, name, "has namespace %q: every object of a cluster template is in ${NAMESPACE}", o.GetNamespace())
		}
		if o.GetKind() == "Cluster" && o.GroupVersionKind().Group == clusterv1.GroupVersion.Group {
			clusters++
			if o.GetName() != "${CLUSTER_NAME}" {
				out.add(RuleTemplateCluster, file, name, "the Cluster is named %q, want ${CLUSTER_NAME}", o.GetName())
			}
		}
	}
	if clusters != 1 {
		out.add(RuleTemplateCluster, file, "", "has %d Cluster objects, want exactly one", clusters)
	}

	for _, o := range objs {
		walkReferences(o.Object, "", func(path string, ref objectKey, what string) {
			switch {
			case what == "clusterName":
				if ref.name != "${CLUSTER_NAME}" {
					out.add(RuleTemplateCluster, file, objectName(o), "%s is %q, want ${CLUSTER_NAME}", path, ref.name)
				}
			case !index[ref]:
				out.add(RuleTemplateReference, file, objectName(o), "%s refers to %s %q (group %q), which is not in the template", path, ref.kind, ref.name, ref.group)
			}
		})
	}

	if haFlavors[flavor] {
		found := false
		for _, o := range objs {
			if o.GetKind() != "MachineHealthCheck" {
				continue
			}
			cluster, _, _ := unstructured.NestedString(o.Object, "spec", "clusterName")
			labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			if _, cp := labels[clusterv1.MachineControlPlaneLabel]; cp && cluster == "${CLUSTER_NAME}" {
				found = true
			}
		}
		if !found {
			out.add(RuleTemplateHealthCheck, file, "", "flavor %s has no MachineHealthCheck for ${CLUSTER_NAME} selecting %s Machines", flavor, clusterv1.MachineControlPlaneLabel)
		}
	}
}

// walkReferences calls fn for every object reference below v: maps with kind, name and
// apiGroup/apiVersion (Cluster API references and ClusterClass templateRefs), Kairos Secret
// references (userPasswordSecretRef, workerTokenSecretRef, contentFrom), topology classRefs
// and clusterName fields.
func walkReferences(v any, path string, fn func(path string, ref objectKey, what string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			p := path + "." + k
			if path == "" && (k == "metadata" || k == "apiVersion" || k == "kind") {
				continue
			}
			switch k {
			case "userPasswordSecretRef", "workerTokenSecretRef", "contentFrom":
				if m, ok := child.(map[string]any); ok {
					fn(p, objectKey{"", "Secret", fmt.Sprint(m["name"])}, "secret")
				}
				continue
			case "classRef":
				if m, ok := child.(map[string]any); ok {
					fn(p, objectKey{clusterv1.GroupVersion.Group, "ClusterClass", fmt.Sprint(m["name"])}, "class")
				}
				continue
			case "clusterName":
				fn(p, objectKey{name: fmt.Sprint(child)}, "clusterName")
				continue
			}
			if m, ok := child.(map[string]any); ok {
				kind, hasKind := m["kind"].(string)
				name, hasName := m["name"].(string)
				group, hasGroup := m["apiGroup"].(string)
				if apiVersion, ok := m["apiVersion"].(string); ok && !hasGroup {
					group, hasGroup = schema.FromAPIVersionAndKind(apiVersion, kind).Group, true
				}
				if hasKind && hasName && hasGroup {
					fn(p, objectKey{group, kind, name}, "ref")
					continue
				}
			}
			walkReferences(child, p, fn)
		}
	case []any:
		for i, child := range t {
			walkReferences(child, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}

// newTyped returns the Go type of the kinds whose schema the checks know.
func newTyped(gvk schema.GroupVersionKind) any {
	switch gvk {
	case clusterv1.GroupVersion.WithKind("Cluster"):
		return &clusterv1.Cluster{}
	case clusterv1.GroupVersion.WithKind("ClusterClass"):
		return &clusterv1.ClusterClass{}
	case clusterv1.GroupVersion.WithKind("MachineDeployment"):
		return &clusterv1.MachineDeployment{}
	case clusterv1.GroupVersion.WithKind("MachineHealthCheck"):
		return &clusterv1.MachineHealthCheck{}
	case controlplanev1.GroupVersion.WithKind("KairosControlPlane"):
		return &controlplanev1.KairosControlPlane{}
	case controlplanev1.GroupVersion.WithKind("KairosControlPlaneTemplate"):
		return &controlplanev1.KairosControlPlaneTemplate{}
	case bootstrapv1.GroupVersion.WithKind("KairosConfig"):
		return &bootstrapv1.KairosConfig{}
	case bootstrapv1.GroupVersion.WithKind("KairosConfigTemplate"):
		return &bootstrapv1.KairosConfigTemplate{}
	case corev1.SchemeGroupVersion.WithKind("Secret"):
		return &corev1.Secret{}
	}
	return nil
}

// checkTemplateSchema decodes an object strictly into its Go type and runs the webhooks' spec
// validation on it (defaults first, as the webhooks do).
func checkTemplateSchema(out *violations, file, label, name string, o *unstructured.Unstructured) {
	typed := newTyped(o.GroupVersionKind())
	if typed == nil {
		// Infrastructure kinds: test/flavors applies every flavor to an API server with the
		// provider's real CRDs (RuleTemplateInfrastructure checks the kinds here).
		return
	}
	raw, err := json.Marshal(o.Object)
	if err != nil {
		out.add(RuleTemplateSchema, file, name, "%s: %v", label, err)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(typed); err != nil {
		out.add(RuleTemplateSchema, file, name, "%s: does not decode as %s: %v", label, o.GroupVersionKind(), err)
		return
	}
	var errs field.ErrorList
	switch t := typed.(type) {
	case *controlplanev1.KairosControlPlane:
		t.Spec.Default()
		errs = kcpvalidation.ValidateKairosControlPlaneSpec(&t.Spec, field.NewPath("spec"))
	case *controlplanev1.KairosControlPlaneTemplate:
		t.Spec.Template.Spec.Default()
		errs = kcpvalidation.ValidateKairosControlPlaneTemplateResourceSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	case *bootstrapv1.KairosConfig:
		t.Spec.Default()
		errs = kcvalidation.ValidateKairosConfigSpec(&t.Spec, field.NewPath("spec"))
	case *bootstrapv1.KairosConfigTemplate:
		t.Spec.Template.Spec.Default()
		errs = kcvalidation.ValidateKairosConfigSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	}
	for _, e := range errs {
		out.add(RuleTemplateSchema, file, name, "%s: %v", label, e)
	}
}

func checkHAReplicas(out *violations, file string, objs []*unstructured.Unstructured) {
	for _, o := range objs {
		if o.GetKind() != "KairosControlPlane" {
			continue
		}
		replicas, found, err := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
		n, convErr := strconv.Atoi(strings.TrimSpace(fmt.Sprint(replicas)))
		if !found || err != nil || convErr != nil || n < 3 || n%2 == 0 {
			out.add(RuleTemplateHealthCheck, file, objectName(o), "with default values spec.replicas is %v: the HA flavor needs an odd number of at least 3 control-plane Machines", replicas)
		}
	}
}
