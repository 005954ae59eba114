package infrastructure_test

import (
	"testing"

	"sigs.k8s.io/cluster-api/util/contract"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestCRDsFollowTheContract checks the generated CRDs against the rules of the v1beta2
// infrastructure contracts that a schema can show: names Cluster API computes from group and
// kind, namespaced, a served v1beta2 version that carries the contract label once loaded, and
// the contract fields.
func TestCRDsFollowTheContract(t *testing.T) {
	files, err := infrastructure.CRDFiles()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string][][]string{
		"KairosSimCluster": {
			{"spec", "controlPlaneEndpoint", "host"}, {"spec", "controlPlaneEndpoint", "port"},
			{"status", "initialization", "provisioned"}, {"status", "failureDomains"}, {"status", "conditions"},
		},
		"KairosSimMachine": {
			{"spec", "providerID"}, {"spec", "failureDomain"}, {"spec", "installedVersion"},
			{"status", "initialization", "provisioned"}, {"status", "addresses"}, {"status", "conditions"},
		},
		// The InfraMachinePool contract's mandatory fields, and status.ready, which the
		// MachinePool controller of Cluster API v1.14 reads for initialization.
		"KairosSimMachinePool": {
			{"spec", "providerIDList"}, {"status", "replicas"}, {"status", "initialization", "provisioned"},
			{"status", "ready"}, {"status", "conditions"}, {"status", "instances"},
		},
		"KairosSimClusterTemplate": {{"spec", "template", "spec", "controlPlaneEndpoint"}},
		"KairosSimMachineTemplate": {{"spec", "template", "spec", "providerID"}, {"spec", "template", "metadata"}},
	}
	if len(crds) != len(fields) {
		t.Fatalf("%d CRDs, want %d", len(crds), len(fields))
	}
	for _, crd := range crds {
		kind := crd.Spec.Names.Kind
		if want := contract.CalculateCRDName(infrav1.GroupVersion.Group, kind); crd.Name != want {
			t.Errorf("CRD %s: name must be %s", crd.Name, want)
		}
		if crd.Spec.Scope != "Namespaced" {
			t.Errorf("%s is not namespaced", kind)
		}
		if crd.Labels["cluster.x-k8s.io/v1beta2"] != "v1beta2" {
			t.Errorf("%s: no v1beta2 contract label: %v", kind, crd.Labels)
		}
		if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1beta2" || !crd.Spec.Versions[0].Storage {
			t.Fatalf("%s: versions %+v", kind, crd.Spec.Versions)
		}
		schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, path := range fields[kind] {
			s := *schema
			for _, p := range path {
				next, ok := s.Properties[p]
				if !ok {
					t.Errorf("%s has no field %v", kind, path)
					break
				}
				s = next
			}
		}
	}
}
