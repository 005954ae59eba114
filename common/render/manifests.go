package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkManifest reads a manifest as the distribution's applier does (k0s'
// applier and k3s' deploy controller read a stream of YAML documents, each a
// Kubernetes object identified by apiVersion, kind and metadata.name). It
// returns the key path of the first problem ("documents[1].metadata.name")
// and the problem.
func checkManifest(content string) (string, error) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(content)))
	objects := 0
	for i := 0; ; i++ {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		at := fmt.Sprintf("documents[%d]", i)
		if err != nil {
			return at, fmt.Errorf("is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if doc == nil {
			continue // an empty document (a leading "---", comments only)
		}
		n, path, err := checkObject(doc, at)
		if err != nil {
			return path, err
		}
		objects += n
	}
	if objects == 0 {
		return "", errors.New("holds no Kubernetes object")
	}
	return "", nil
}

// checkObject checks one object, or the items of a List, and returns how
// many objects it holds.
func checkObject(v any, at string) (int, string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return 0, at, errors.New("is not a Kubernetes object (a mapping with apiVersion, kind and metadata.name)")
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if s, ok := m[k].(string); !ok || strings.TrimSpace(s) == "" {
			return 0, at + "." + k, errors.New("required: every Kubernetes object has apiVersion and kind")
		}
	}
	if kind := m["kind"].(string); strings.HasSuffix(kind, "List") {
		if items, ok := m["items"].([]any); ok {
			total := 0
			for i, item := range items {
				n, path, err := checkObject(item, fmt.Sprintf("%s.items[%d]", at, i))
				if err != nil {
					return 0, path, err
				}
				total += n
			}
			return total, "", nil
		}
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		return 0, at + ".metadata", errors.New("required: the object needs metadata.name")
	}
	if s, ok := md["name"].(string); !ok || strings.TrimSpace(s) == "" {
		return 0, at + ".metadata.name", errors.New("required: the distribution applies objects by name")
	}
	return 1, "", nil
}
