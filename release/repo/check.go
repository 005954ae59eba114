package repo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cluster-api/util/contract"
	"sigs.k8s.io/yaml"
)

// The rules a provider repository must follow. Every Violation names one of them; the
// clusterctl provider contract (contract version v1beta2) is the source of the
// components, metadata and template rules, the others are this project's conventions.
const (
	// RuleVersion: the release version is a semantic version with a leading v (vX.Y.Z),
	// because clusterctl reads the version from the folder name.
	RuleVersion = "version"
	// RuleMetadata: metadata.yaml is a clusterctl.cluster.x-k8s.io/v1alpha3 Metadata with
	// at least one release series, no series twice, every contract v1beta2.
	RuleMetadata = "metadata"
	// RuleMetadataSeries: the release's major.minor series is listed in the provider's
	// metadata file (clusterctl refuses to install a version outside its series).
	RuleMetadataSeries = "metadata-series"
	// RuleYAML: the file is a stream of Kubernetes objects (apiVersion, kind, metadata.name).
	RuleYAML = "yaml"
	// RuleDuplicateObject: no object appears twice.
	RuleDuplicateObject = "duplicate-object"
	// RuleOneNamespace: the components YAML holds exactly one Namespace, the target namespace.
	RuleOneNamespace = "one-namespace"
	// RuleTargetNamespace: every namespaced object of the components YAML (and every
	// namespace it refers to: webhook Services, RBAC subjects) is in the target namespace,
	// and cluster-scoped objects carry no namespace.
	RuleTargetNamespace = "target-namespace"
	// RuleProviderLabel: every object of the components YAML has the label
	// cluster.x-k8s.io/provider=<provider label>.
	RuleProviderLabel = "provider-label"
	// RuleManagerContainer: the components YAML has a Deployment, and every Deployment runs
	// the controller in a container named "manager".
	RuleManagerContainer = "manager-container"
	// RuleManagerImage: the manager image is ${<PROVIDER>_IMAGE:=<repository>:<version>}, the
	// image released with this version, overridable by a clusterctl variable.
	RuleManagerImage = "manager-image"
	// RuleCRDContractLabel: every CRD has the label cluster.x-k8s.io/v1beta2 naming served
	// versions of that CRD ("_"-separated), so Cluster API knows which version follows the
	// v1beta2 contract.
	RuleCRDContractLabel = "crd-contract-label"
	// RuleCRDReleaseAnnotation: every CRD carries the provider's release annotation
	// (Provider.ReleaseAnnotation) set to the release version, so that a management cluster
	// knows which release installed it: the control-plane provider reads the bootstrap
	// provider's to enforce its version-skew policy.
	RuleCRDReleaseAnnotation = "crd-release-annotation"
	// RuleCRDName: every CRD is named as Cluster API looks it up:
	// contract.CalculateCRDName(group, kind), that is <lower-case plural kind>.<group>.
	RuleCRDName = "crd-name"
	// RuleVariableSyntax: clusterctl variables are ${NAME} or ${NAME:=default}, upper case,
	// without blanks, and the file has no "$$".
	RuleVariableSyntax = "variable-syntax"
	// RuleVariableDefault: every occurrence of a variable in one file is written the same
	// way, and every variable of a components YAML has a default (clusterctl init needs no
	// variable set).
	RuleVariableDefault = "variable-default"
	// RuleTemplateNamespace: every object of a cluster template is namespaced and in
	// ${NAMESPACE}; a template creates no Namespace (clusterctl assumes it exists).
	RuleTemplateNamespace = "template-namespace"
	// RuleTemplateCluster: a cluster template holds exactly one Cluster, named ${CLUSTER_NAME};
	// clusterName fields name it.
	RuleTemplateCluster = "template-cluster"
	// RuleTemplateReference: every object a template object refers to (infrastructure,
	// control plane, bootstrap, ClusterClass templates, Secrets) is in the template itself.
	RuleTemplateReference = "template-reference"
	// RuleTemplateVariables: every variable of a template is documented in
	// config/templates/README.md, and the required ones have a sample value in the tool.
	RuleTemplateVariables = "template-variables"
	// RuleTemplateSchema: once the variables are substituted, the Cluster API and Kairos
	// objects decode strictly (no unknown field) and pass the Kairos API validation.
	RuleTemplateSchema = "template-schema"
	// RuleTemplateHealthCheck: the HA flavor runs an odd number (at least 3) of control-plane
	// Machines and has a MachineHealthCheck for them.
	RuleTemplateHealthCheck = "template-control-plane-healthcheck"
	// RuleTemplateFlavors: config/templates has the flavors the release must ship, and every
	// flavor names its infrastructure (FlavorInfrastructure).
	RuleTemplateFlavors = "template-flavors"
	// RuleTemplateInfrastructure: with default values, every infrastructure object of a
	// flavor and every infrastructure reference is of the flavor's infrastructure kinds, at
	// the API version it is checked against; the Cluster refers to the infrastructure
	// cluster kind, machines to the machine template kind; only the sandbox flavors use the
	// KAIROS_INFRA_* variables.
	RuleTemplateInfrastructure = "template-infrastructure"
)

// Violation is one broken rule.
type Violation struct {
	Rule string
	// File is the repository file the violation is in (components YAML, metadata.yaml, a
	// cluster template), or the source file for metadata and version problems.
	File string
	// Object names the offending object as "Kind namespace/name", when there is one.
	Object  string
	Message string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %q", v.Rule)
	if v.File != "" {
		fmt.Fprintf(&b, " in %s", v.File)
	}
	if v.Object != "" {
		fmt.Fprintf(&b, ", %s", v.Object)
	}
	b.WriteString(": ")
	b.WriteString(v.Message)
	return b.String()
}

// CheckError is returned when the repository breaks rules; it lists every violation.
type CheckError struct {
	Provider   string
	Version    string
	Violations []Violation
}

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s breaks %d rule(s) of the clusterctl provider repository:", e.Provider, e.Version, len(e.Violations))
	for _, v := range e.Violations {
		b.WriteString("\n  - ")
		b.WriteString(v.String())
	}
	return b.String()
}

// Rules lists the distinct rules broken, sorted.
func (e *CheckError) Rules() []string {
	seen := map[string]bool{}
	var rules []string
	for _, v := range e.Violations {
		if !seen[v.Rule] {
			seen[v.Rule] = true
			rules = append(rules, v.Rule)
		}
	}
	sort.Strings(rules)
	return rules
}

// HasRule reports whether err is (or wraps) a CheckError with a violation of rule.
func HasRule(err error, rule string) bool {
	var ce *CheckError
	if !errors.As(err, &ce) {
		return false
	}
	for _, v := range ce.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

type violations []Violation

func (vs *violations) add(rule, file, object, format string, args ...any) {
	*vs = append(*vs, Violation{Rule: rule, File: file, Object: object, Message: fmt.Sprintf(format, args...)})
}

// objectName renders an object for messages.
func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

// ParseObjects splits a multi-document YAML stream into objects; empty documents are skipped.
func ParseObjects(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("document %d: apiVersion, kind and metadata.name are required (got %q, %q, %q)", i, o.GetAPIVersion(), o.GetKind(), o.GetName())
		}
		objs = append(objs, o)
	}
}

// clusterScopedKinds are the built-in kinds without a namespace that a components YAML may
// contain; kinds of CRDs in the same file add to them according to their scope.
var clusterScopedKinds = map[string]bool{
	"Namespace":                        true,
	"CustomResourceDefinition":         true,
	"ClusterRole":                      true,
	"ClusterRoleBinding":               true,
	"MutatingWebhookConfiguration":     true,
	"ValidatingWebhookConfiguration":   true,
	"ValidatingAdmissionPolicy":        true,
	"ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy":          true,
	"MutatingAdmissionPolicyBinding":   true,
	"APIService":                       true,
	"PriorityClass":                    true,
	"StorageClass":                     true,
	"IngressClass":                     true,
	"RuntimeClass":                     true,
	"CSIDriver":                        true,
	"ClusterIssuer":                    true,
}

// ProviderLabel is the label clusterctl (and kubectl users) select a provider's objects by.
const ProviderLabel = "cluster.x-k8s.io/provider"

// ContractLabel is the CRD label that names the versions following the v1beta2 contract.
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// CheckComponents checks a components YAML against the clusterctl provider contract and
// this project's conventions. warnings are problems that do not fail the release.
func CheckComponents(p Provider, version, imageRepository string, data []byte) (vs []Violation, warnings []string) {
	var out violations
	file := p.ComponentsFile

	vars, problems := ScanVariables(string(data))
	for _, pr := range problems {
		out.add(RuleVariableSyntax, file, "", "%s", pr)
	}
	set, problems := Summarize(vars)
	for _, pr := range problems {
		out.add(RuleVariableDefault, file, "", "%s", pr)
	}
	for _, name := range set.Required {
		out.add(RuleVariableDefault, file, "", "${%s} has no default: clusterctl init would fail unless every user sets it; write ${%s:=<default>}", name, name)
	}

	objs, err := ParseObjects(data)
	if err != nil {
		out.add(RuleYAML, file, "", "%v", err)
		return out, nil
	}

	scopes := map[string]bool{}
	for k, v := range clusterScopedKinds {
		scopes[k] = v
	}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			scopes[kind] = scope == "Cluster"
		}
	}

	// One Namespace: the target namespace.
	var namespaces []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o)
		}
	}
	target := ""
	switch len(namespaces) {
	case 0:
		out.add(RuleOneNamespace, file, "", "there is no Namespace object: clusterctl init would need --target-namespace")
	case 1:
		target = namespaces[0].GetName()
	default:
		names := make([]string, 0, len(namespaces))
		for _, n := range namespaces {
			names = append(names, n.GetName())
		}
		out.add(RuleOneNamespace, file, "", "there are %d Namespace objects (%s): clusterctl refuses a components YAML with more than one", len(namespaces), strings.Join(names, ", "))
	}

	seen := map[string]bool{}
	deployments := 0
	for _, o := range objs {
		name := objectName(o)
		key := o.GroupVersionKind().GroupKind().String() + " " + o.GetNamespace() + "/" + o.GetName()
		if seen[key] {
			out.add(RuleDuplicateObject, file, name, "appears more than once")
		}
		seen[key] = true

		if got := o.GetLabels()[ProviderLabel]; got != p.Label {
			out.add(RuleProviderLabel, file, name, "label %s is %q, want %q", ProviderLabel, got, p.Label)
		}

		clusterScoped := scopes[o.GetKind()]
		switch {
		case clusterScoped && o.GetNamespace() != "":
			out.add(RuleTargetNamespace, file, name, "is cluster-scoped but has namespace %q", o.GetNamespace())
		case !clusterScoped && target != "" && o.GetNamespace() != target:
			out.add(RuleTargetNamespace, file, name, "is in namespace %q, not in the target namespace %q", o.GetNamespace(), target)
		}
		if target != "" {
			checkNamespaceReferences(&out, file, o, target)
		}

		switch o.GetKind() {
		case "CustomResourceDefinition":
			checkCRD(&out, file, o)
			checkReleaseAnnotation(&out, file, o, p, version)
		case "Deployment":
			deployments++
			checkDeployment(&out, &warnings, file, o, p, version, imageRepository)
		}
	}
	if deployments == 0 {
		out.add(RuleManagerContainer, file, "", "there is no Deployment: the controller must run as a Deployment with a container named manager")
	}
	return out, warnings
}

// checkNamespaceReferences checks the namespaces an object refers to: clusterctl rewrites
// them when installing into another namespace, but only if they start out as the target.
func checkNamespaceReferences(out *violations, file string, o *unstructured.Unstructured, target string) {
	name := objectName(o)
	switch o.GetKind() {
	case "ClusterRoleBinding", "RoleBinding":
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			if m["kind"] == "ServiceAccount" && m["namespace"] != target {
				out.add(RuleTargetNamespace, file, name, "subject ServiceAccount %v is in namespace %v, not in the target namespace %q", m["name"], m["namespace"], target)
			}
		}
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		webhooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, w := range webhooks {
			m, _ := w.(map[string]any)
			ns, found, _ := unstructured.NestedString(m, "clientConfig", "service", "namespace")
			if found && ns != target {
				out.add(RuleTargetNamespace, file, name, "webhook %v calls a Service in namespace %q, not in the target namespace %q", m["name"], ns, target)
			}
		}
	case "CustomResourceDefinition":
		ns, found, _ := unstructured.NestedString(o.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace")
		if found && ns != target {
			out.add(RuleTargetNamespace, file, name, "conversion webhook calls a Service in namespace %q, not in the target namespace %q", ns, target)
		}
	}
}

func checkCRD(out *violations, file string, o *unstructured.Unstructured) {
	name := objectName(o)
	group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
	if want := contract.CalculateCRDName(group, kind); o.GetName() != want {
		out.add(RuleCRDName, file, name, "is named %q but Cluster API looks %s (group %s) up as %q", o.GetName(), kind, group, want)
	}

	served := map[string]bool{}
	versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if s, _ := m["served"].(bool); s {
			served[fmt.Sprint(m["name"])] = true
		}
	}
	value, ok := o.GetLabels()[ContractLabel]
	if !ok || value == "" {
		out.add(RuleCRDContractLabel, file, name, "has no label %s naming the served version(s) that follow the v1beta2 contract", ContractLabel)
		return
	}
	for _, v := range strings.Split(value, "_") {
		if !served[v] {
			out.add(RuleCRDContractLabel, file, name, "label %s=%s names version %q, which the CRD does not serve", ContractLabel, value, v)
		}
	}
}

func checkReleaseAnnotation(out *violations, file string, o *unstructured.Unstructured, p Provider, version string) {
	got, ok := o.GetAnnotations()[p.ReleaseAnnotation]
	switch {
	case !ok:
		out.add(RuleCRDReleaseAnnotation, file, objectName(o), "has no annotation %s: build the components with BuildProviderComponents, which sets it to the release version %s", p.ReleaseAnnotation, version)
	case got != version:
		out.add(RuleCRDReleaseAnnotation, file, objectName(o), "annotation %s is %q, want the release version %q", p.ReleaseAnnotation, got, version)
	}
}

func checkDeployment(out *violations, warnings *[]string, file string, o *unstructured.Unstructured, p Provider, version, imageRepository string) {
	name := objectName(o)
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	var manager map[string]any
	for _, c := range containers {
		m, _ := c.(map[string]any)
		if m["name"] == "manager" {
			manager = m
		}
	}
	if manager == nil {
		out.add(RuleManagerContainer, file, name, "has no container named manager")
		return
	}
	if want := p.ImageReference(imageRepository, version); manager["image"] != want {
		out.add(RuleManagerImage, file, name, "container manager runs image %v, want %s", manager["image"], want)
	}
	if cmd, ok := manager["command"].([]any); ok && len(cmd) > 0 && fmt.Sprint(cmd[0]) != p.ImageEntrypoint {
		*warnings = append(*warnings, fmt.Sprintf("%s: %s: container manager runs command %v, but the released image (ko) has the manager at %s: "+
			"remove command from %s so the image's entrypoint runs, or set it to %s", file, name, cmd[0], p.ImageEntrypoint, filepath.Join(filepath.Dir(p.ConfigDir), "manager", "manager.yaml"), p.ImageEntrypoint))
	}
}
