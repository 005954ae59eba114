// Package components builds the providers' kustomize configuration, in process, into the
// objects their clusterctl components YAML is made of, and offers small look-ups over
// them for tests.
package components

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// RepoRoot returns the repository root: the nearest directory at or above start that
// holds go.work. An empty start means the working directory.
func RepoRoot(start string) (string, error) {
	if start == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		start = wd
	}
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", err
	}
	for {
		info, err := os.Stat(filepath.Join(dir, "go.work"))
		if err == nil && !info.IsDir() {
			return dir, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work at or above %s", start)
		}
		dir = parent
	}
}

// Build runs kustomize on the kustomization in dir, with kustomize's default options
// (files only from within each kustomization's root, builtin transformers only), and
// returns the objects in output order together with the YAML kustomize would print.
func Build(dir string) ([]*unstructured.Unstructured, []byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, m.Size())
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	return objs, out, nil
}

// OfKind returns the objects of the given kind.
func OfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Find returns the object of the given kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Convert decodes an object into a typed API struct (e.g. *appsv1.Deployment).
func Convert(obj *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into)
}

// ClusterScoped lists the kinds of a components YAML that have no namespace.
var ClusterScoped = map[string]bool{
	"Namespace":                      true,
	"CustomResourceDefinition":       true,
	"ClusterRole":                    true,
	"ClusterRoleBinding":             true,
	"MutatingWebhookConfiguration":   true,
	"ValidatingWebhookConfiguration": true,
}
