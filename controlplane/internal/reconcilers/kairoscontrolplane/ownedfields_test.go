package kairoscontrolplane

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestOwnedFields(t *testing.T) {
	const object = `{
		"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KairosConfig",
		"metadata": {"name": "m1", "labels": {"a": "1", "b": "2"}},
		"spec": {
			"role": "control-plane",
			"userName": "kairos",
			"userGroups": ["admin", "wheel"],
			"files": [
				{"path": "/etc/a", "content": "x", "permissions": "0644"},
				{"path": "/etc/b", "content": "y"}
			],
			"manifests": [{"name": "m", "content": "c"}],
			"sans": ["a.example.com", "b.example.com"],
			"providerID": {"source": "Machine", "hostnamePrefix": "cp-"}
		},
		"status": {"ready": true}
	}`
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(object), &u.Object); err != nil {
		t.Fatal(err)
	}
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	u.SetManagedFields([]metav1.ManagedFieldsEntry{
		// What the control plane created: a keyed item of files (only some of its fields), a
		// set member, an atomic list, a field of a struct, one label.
		{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: fields(`{
			"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
			"f:spec": {".": {}, "f:role": {}, "f:userGroups": {},
				"f:files": {".": {}, "k:{\"path\":\"/etc/a\"}": {".": {}, "f:path": {}, "f:content": {}}},
				"f:sans": {"v:\"b.example.com\"": {}},
				"f:providerID": {".": {}, "f:hostnamePrefix": {}},
				"f:removedSince": {}
			}}`)},
		// Another manager's fields and the control plane's status writes do not count.
		{Manager: "bootstrap-webhook", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: fields(`{"f:spec": {"f:userName": {}, "f:manifests": {}}}`)},
		{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsV1: fields(`{"f:status": {"f:ready": {}}}`)},
	})
	got, found, err := ownedFields(u, fieldManager)
	if err != nil || !found {
		t.Fatalf("ownedFields = %v, %v", found, err)
	}
	want := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"a": "1"}},
		"spec": map[string]any{
			"role":       "control-plane",
			"userGroups": []any{"admin", "wheel"},
			"files":      []any{map[string]any{"path": "/etc/a", "content": "x"}},
			"sans":       []any{"b.example.com"},
			"providerID": map[string]any{"hostnamePrefix": "cp-"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("owned fields =\n%s\nwant\n%s", g, w)
	}

	if _, found, err := ownedFields(u, "nobody"); found || err != nil {
		t.Errorf("a manager without entries: found %v, %v", found, err)
	}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: fieldManager, FieldsV1: fields(`{"no-prefix": {}}`)}})
	if _, _, err := ownedFields(u, fieldManager); err == nil {
		t.Error("unreadable managedFields: no error")
	}
}
