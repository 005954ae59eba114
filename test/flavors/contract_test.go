package flavors_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/flavors"
)

// withoutV1beta2Label are the pinned providers whose CRDs carry no cluster.x-k8s.io/v1beta2
// contract label, only v1beta1. Cluster API v1.14 still accepts them (the v1beta2 contract
// is compatible with v1beta1 until v1beta1 is removed), and the KairosControlPlane controller
// falls back to the v1beta1 label to clone their machine templates. CAPK v0.11.2's
// metadata.yaml maps its 0.11 series to contract v1beta2, its CRD kustomizations still label
// only v1beta1.
var withoutV1beta2Label = map[string]bool{"kubevirt": true}

// The CRDs of every pinned provider carry the contract labels Cluster API resolves
// versions with (a compatible contract naming the version the flavor writes) and the labels
// clusterctl adds on install.
func TestContractLabels(t *testing.T) {
	for _, flavor := range sortedFlavors() {
		infra := repo.FlavorInfrastructure[flavor]
		p := providers[infra.Name]
		if p.excluded != "" || infra.Name == repo.SandboxInfrastructure.Name {
			continue
		}
		t.Run(infra.Name, func(t *testing.T) {
			kinds := append(infra.Kinds(), strings.TrimSuffix(infra.MachineTemplateKind, "Template"))
			hasV1beta2 := true
			for _, kind := range kinds {
				crd := p.crdOf(kind)
				if crd == nil {
					t.Errorf("%s has no CRD for %s", p.from, kind)
					continue
				}
				labels := flavors.ContractLabels(crd)
				t.Logf("%s: %s", crd.Name, strings.Join(labels, ", "))
				compatible := false
				for _, l := range labels {
					contract, versions, _ := strings.Cut(l, "=")
					if (contract == "v1beta2" || contract == "v1beta1") && slices.Contains(strings.Split(versions, "_"), infra.Version) {
						compatible = true
					}
				}
				if !compatible {
					t.Errorf("%s: no v1beta2 or v1beta1 contract label names %s, the version the flavor writes (labels %v)", crd.Name, infra.Version, labels)
				}
				if crd.Labels["cluster.x-k8s.io/v1beta2"] == "" {
					hasV1beta2 = false
				}
				for k, v := range flavors.ClusterctlLabels(infra.Name) {
					if got, ok := crd.Labels[k]; !ok || got != v {
						t.Errorf("%s: label %s=%q, clusterctl sets %q", crd.Name, k, got, v)
					}
				}
			}
			if hasV1beta2 == withoutV1beta2Label[infra.Name] {
				t.Errorf("%s: v1beta2 contract label on every kind is %v; withoutV1beta2Label (and the README) say %v",
					infra.Name, hasV1beta2, !withoutV1beta2Label[infra.Name])
			}
		})
	}
}
