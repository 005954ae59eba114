package v1beta2_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

func TestAddToScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := bootstrapv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"KairosConfig", "KairosConfigList", "KairosConfigTemplate", "KairosConfigTemplateList"} {
		gvk := bootstrapv1.GroupVersion.WithKind(kind)
		if !scheme.Recognizes(gvk) {
			t.Errorf("scheme does not recognize %s", gvk)
		}
	}
	if bootstrapv1.GroupVersion.String() != "bootstrap.cluster.x-k8s.io/v1beta2" {
		t.Errorf("GroupVersion = %s", bootstrapv1.GroupVersion)
	}
}

func TestConditionAccessors(t *testing.T) {
	c := &bootstrapv1.KairosConfig{}
	conds := []metav1.Condition{{Type: bootstrapv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.ReadyReason}}
	c.SetConditions(conds)
	if got := c.GetConditions(); len(got) != 1 || got[0].Type != bootstrapv1.ReadyCondition {
		t.Fatalf("GetConditions() = %v", got)
	}
	if c.Status.Conditions[0].Reason != bootstrapv1.ReadyReason {
		t.Fatalf("SetConditions did not set status.conditions: %v", c.Status.Conditions)
	}
}

// TestSerialization pins the wire names of the contract fields Cluster API reads,
// and that an empty status does not serialize an empty initialization (the CRD requires at
// least one property in it).
func TestSerialization(t *testing.T) {
	created := true
	c := bootstrapv1.KairosConfig{
		Spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker},
		Status: bootstrapv1.KairosConfigStatus{
			DataSecretName: "m-0",
			Initialization: bootstrapv1.KairosConfigInitializationStatus{DataSecretCreated: &created},
		},
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	status, _ := got["status"].(map[string]any)
	if status["dataSecretName"] != "m-0" {
		t.Errorf("status = %v", status)
	}
	// The v1beta1 contract's status.ready has no reader (see KairosConfigStatus).
	if _, ok := status["ready"]; ok {
		t.Errorf("status.ready serialized: %v", status)
	}
	if init, _ := status["initialization"].(map[string]any); init["dataSecretCreated"] != true {
		t.Errorf("status.initialization = %v", status["initialization"])
	}

	empty, err := yaml.Marshal(bootstrapv1.KairosConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var emptyMap map[string]any
	if err := yaml.Unmarshal(empty, &emptyMap); err != nil {
		t.Fatal(err)
	}
	if _, ok := emptyMap["status"]; ok {
		t.Errorf("an empty status is serialized: %s", empty)
	}
	if _, ok := emptyMap["spec"]; ok {
		t.Errorf("an empty spec is serialized: %s", empty)
	}
}
