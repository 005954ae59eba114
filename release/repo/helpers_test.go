package repo

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// root is the repository root the tests build from.
func root(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	r, err := FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	componentsOnce sync.Map // provider name -> *builtComponents
)

type builtComponents struct {
	once sync.Once
	data []byte
	err  error
}

// components builds a provider's components YAML once per test binary, as the v0.1.0
// release would (the image carries the version).
func components(t *testing.T, p Provider) []byte {
	t.Helper()
	v, _ := componentsOnce.LoadOrStore(p.Name, &builtComponents{})
	b := v.(*builtComponents)
	b.once.Do(func() {
		b.data, b.err = BuildProviderComponents(root(t), p, "", "v0.1.0")
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.data
}

// mutate parses a YAML stream, lets fn change the objects and renders them again.
func mutate(t *testing.T, data []byte, fn func(objs []*unstructured.Unstructured) []*unstructured.Unstructured) []byte {
	t.Helper()
	objs, err := ParseObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	objs = fn(objs)
	var b bytes.Buffer
	for _, o := range objs {
		out, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(out)
	}
	return b.Bytes()
}

// first returns the first object of a kind (and name, when given).
func first(t *testing.T, objs []*unstructured.Unstructured, kind, nameContains string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && strings.Contains(o.GetName(), nameContains) {
			return o
		}
	}
	t.Fatalf("no %s %q", kind, nameContains)
	return nil
}

func set(t *testing.T, o *unstructured.Unstructured, value any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, value, path...); err != nil {
		t.Fatal(err)
	}
}

// expectRule asserts that vs has a violation of rule whose object contains object (when
// given), and reports the violations otherwise.
func expectRule(t *testing.T, vs []Violation, rule, object string) {
	t.Helper()
	for _, v := range vs {
		if v.Rule == rule && strings.Contains(v.Object, object) {
			if v.Message == "" {
				t.Errorf("violation of %s has no message", rule)
			}
			return
		}
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	t.Errorf("want a violation of rule %q on %q, got %d violation(s):%s", rule, object, len(vs), b.String())
}

func expectClean(t *testing.T, vs []Violation) {
	t.Helper()
	for _, v := range vs {
		t.Errorf("unexpected violation: %s", v)
	}
}
