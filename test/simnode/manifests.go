package simnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// manifestFiles returns the manifests a control-plane node applies: k0s applies every
// /var/lib/k0s/manifests/<stack>/*.yaml, k3s every file of its manifest directory.
func manifestFiles(p *plan) []string {
	prefix := k3sManifestDir + "/"
	if p.distribution == render.K0s {
		prefix = k0sManifestDir + "/"
	}
	var paths []string
	for path := range p.files {
		if !strings.HasPrefix(path, prefix) {
			continue
		}
		rest := strings.TrimPrefix(path, prefix)
		if p.distribution == render.K0s && strings.Count(rest, "/") != 1 {
			continue // k0s reads stacks: one directory level
		}
		if p.distribution == render.K3s && strings.Contains(rest, "/") {
			continue
		}
		if strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml") || strings.HasSuffix(path, ".json") {
			paths = append(paths, path)
		}
	}
	sort.Strings(paths)
	return paths
}

// decodeManifest splits a manifest file into objects.
func decodeManifest(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("an object without apiVersion and kind")
		}
		out = append(out, u)
	}
}

// applyManifests applies the node's manifests with server-side apply, retrying while an object
// depends on another one (a CRD) that is not served yet, as the distributions' appliers do.
func (c *Cluster) applyManifests(ctx context.Context, p *plan) error {
	owner := "k3s"
	if p.distribution == render.K0s {
		owner = "k0s"
	}
	for _, path := range manifestFiles(p) {
		objs, err := decodeManifest([]byte(p.files[path]))
		if err != nil {
			return refuse(ReasonBootstrapDataRefused, "manifest %s: %v", path, err)
		}
		for _, u := range objs {
			if err := c.apply(ctx, u, owner); err != nil {
				return fmt.Errorf("manifest %s: applying %s %s: %w", path, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

func (c *Cluster) apply(ctx context.Context, u *unstructured.Unstructured, owner string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			namespaced, err := c.client.IsObjectNamespaced(u)
			if err != nil {
				return err
			}
			if namespaced && u.GetNamespace() == "" {
				u.SetNamespace("default")
			}
			return c.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership)
		}()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
