package repo

import (
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// InfrastructureGroup is the API group of every Cluster API infrastructure provider's kinds.
const InfrastructureGroup = "infrastructure.cluster.x-k8s.io"

// Infrastructure is the infrastructure provider a flavor is written for: the kinds its
// objects and references may use. The tests that apply each flavor to an API server with the
// provider's real CRDs (test/flavors) look the provider up by Name.
type Infrastructure struct {
	// Name is the provider's clusterctl name (clusterctl init --infrastructure <Name>); "sim"
	// is the sandbox's simulated infrastructure (test/infrastructure).
	Name string
	// Version is the API version of its kinds in the templates.
	Version string
	// ClusterKind, MachineTemplateKind and, for ClusterClass flavors, ClusterTemplateKind are
	// the kinds the Cluster API and Kairos objects refer to.
	ClusterKind         string
	MachineTemplateKind string
	ClusterTemplateKind string
	// OtherKinds are further kinds of the provider a flavor may hold (objects its machine
	// templates refer to, such as Metal3DataTemplate).
	OtherKinds []string
}

// Kinds returns every kind of the provider a flavor may use, sorted.
func (i Infrastructure) Kinds() []string {
	var kinds []string
	for _, k := range append([]string{i.ClusterKind, i.MachineTemplateKind, i.ClusterTemplateKind}, i.OtherKinds...) {
		if k != "" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	return kinds
}

// The infrastructures of the shipped flavors.
var (
	// SandboxInfrastructure is the sandbox's simulated infrastructure. The sandbox flavors
	// name its kinds through the KAIROS_INFRA_* variables, whose defaults are these.
	SandboxInfrastructure = Infrastructure{
		Name: "sim", Version: "v1beta2",
		ClusterKind: "KairosSimCluster", MachineTemplateKind: "KairosSimMachineTemplate", ClusterTemplateKind: "KairosSimClusterTemplate",
	}
	// VSphere is Cluster API Provider vSphere (CAPV).
	VSphere = Infrastructure{Name: "vsphere", Version: "v1beta2", ClusterKind: "VSphereCluster", MachineTemplateKind: "VSphereMachineTemplate"}
	// Metal3 is Cluster API Provider Metal3 (CAPM3).
	Metal3 = Infrastructure{
		Name: "metal3", Version: "v1beta2", ClusterKind: "Metal3Cluster", MachineTemplateKind: "Metal3MachineTemplate",
		OtherKinds: []string{"Metal3DataTemplate"},
	}
	// KubeVirt is Cluster API Provider KubeVirt (CAPK).
	KubeVirt = Infrastructure{Name: "kubevirt", Version: "v1alpha1", ClusterKind: "KubevirtCluster", MachineTemplateKind: "KubevirtMachineTemplate"}
	// Proxmox is Cluster API Provider Proxmox (CAPMOX).
	Proxmox = Infrastructure{Name: "proxmox", Version: "v1alpha2", ClusterKind: "ProxmoxCluster", MachineTemplateKind: "ProxmoxMachineTemplate"}
)

// FlavorInfrastructure maps every flavor the release ships to its infrastructure. A flavor
// folder that is not listed breaks RuleTemplateFlavors.
var FlavorInfrastructure = map[string]Infrastructure{
	"default":      SandboxInfrastructure,
	"k3s":          SandboxInfrastructure,
	"ha":           SandboxInfrastructure,
	"clusterclass": SandboxInfrastructure,
	"vsphere":      VSphere,
	"metal3":       Metal3,
	"kubevirt":     KubeVirt,
	"proxmox":      Proxmox,
}

// SandboxFlavors are the flavors for the sandbox's simulated infrastructure.
func SandboxFlavors() []string {
	var out []string
	for f, i := range FlavorInfrastructure {
		if i.Name == SandboxInfrastructure.Name {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// sandboxVariablePrefix starts the variables only the sandbox flavors may use: a flavor for a
// real infrastructure fixes its kinds.
const sandboxVariablePrefix = "KAIROS_INFRA_"

// checkTemplateInfrastructure checks, on a template rendered with default values, that
// every infrastructure object and reference uses the flavor's infrastructure kinds at its
// API version, and that the Cluster and machine templates point at the right kinds. names
// are the objects' names for messages.
func checkTemplateInfrastructure(out *violations, file, flavor string, objs []*unstructured.Unstructured, names []string, variables VariableSet) {
	infra, ok := FlavorInfrastructure[flavor]
	if !ok {
		return // RuleTemplateFlavors reports it.
	}
	kinds := infra.Kinds()
	if infra.Name != SandboxInfrastructure.Name {
		for name := range variables.Optional {
			if strings.HasPrefix(name, sandboxVariablePrefix) {
				out.add(RuleTemplateInfrastructure, file, "", "${%s} is a sandbox variable: the %s flavor fixes its infrastructure kinds", name, flavor)
			}
		}
	}
	apiVersion := schema.GroupVersion{Group: InfrastructureGroup, Version: infra.Version}.String()
	for i, o := range objs {
		name := names[i]
		if o.GroupVersionKind().Group == InfrastructureGroup {
			if !slices.Contains(kinds, o.GetKind()) {
				out.add(RuleTemplateInfrastructure, file, name, "is not a kind of the %s infrastructure of flavor %s (%s)", infra.Name, flavor, strings.Join(kinds, ", "))
			} else if o.GetAPIVersion() != apiVersion {
				out.add(RuleTemplateInfrastructure, file, name, "has apiVersion %s, want %s (the %s API the flavor is checked against)", o.GetAPIVersion(), apiVersion, infra.Name)
			}
		}
		walkReferences(o.Object, "", func(path string, ref objectKey, what string) {
			if what != "ref" || ref.group != InfrastructureGroup {
				return
			}
			want := wantedInfrastructureKind(infra, o.GetKind(), path)
			switch {
			case want != "" && ref.kind != want:
				out.add(RuleTemplateInfrastructure, file, name, "%s refers to kind %s, want %s (flavor %s)", path, ref.kind, want, flavor)
			case !slices.Contains(kinds, ref.kind):
				out.add(RuleTemplateInfrastructure, file, name, "%s refers to kind %s, which is not a kind of the %s infrastructure (%s)", path, ref.kind, infra.Name, strings.Join(kinds, ", "))
			}
		})
	}
}

// wantedInfrastructureKind is the kind the reference at path of an object of kind owner must
// have, or "" when any kind of the infrastructure will do.
func wantedInfrastructureKind(infra Infrastructure, owner, path string) string {
	switch {
	case owner == "Cluster" && path == ".spec.infrastructureRef":
		return infra.ClusterKind
	case owner == "ClusterClass" && path == ".spec.infrastructure.templateRef":
		return infra.ClusterTemplateKind
	case strings.HasSuffix(path, "infrastructureRef"), strings.HasSuffix(path, ".machineInfrastructure.templateRef"),
		strings.HasSuffix(path, ".infrastructure.templateRef"):
		return infra.MachineTemplateKind
	}
	return ""
}

// checkFlavorInfrastructure reports flavor folders whose infrastructure is not declared.
func checkFlavorInfrastructure(out *violations, flavor, dir string) {
	if _, ok := FlavorInfrastructure[flavor]; !ok {
		out.add(RuleTemplateFlavors, dir, "", "flavor %q names no infrastructure: add it to FlavorInfrastructure in release/repo/infrastructure.go (and its provider's CRDs to test/flavors)", flavor)
	}
}
