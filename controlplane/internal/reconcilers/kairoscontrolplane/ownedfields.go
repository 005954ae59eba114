package kairoscontrolplane

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// ownedFields returns the part of obj that manager set, as the API server recorded it in obj's
// managedFields, and whether manager recorded anything at all.
//
// The control plane decides rollouts on what it asked for, not on what the installed bootstrap
// provider's webhook or a newer CRD added to a KairosConfig: a default the control plane does
// not know about must never look like a change. The API server records a create's fields under
// the request's field manager before mutating admission runs, so webhook defaults belong to no
// manager (k8s.io/apiserver pkg/endpoints/handlers/create.go: UpdateNoErrors before Admit).
//
// The managed field set is walked on the object itself rather than through a typed schema:
// associative lists (x-kubernetes-list-type: map, such as spec.files keyed by path) are
// addressed by their key fields, sets by value, atomic lists are leaves copied whole.
func ownedFields(obj *unstructured.Unstructured, manager string) (map[string]any, bool, error) {
	owned := &fieldpath.Set{}
	found := false
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager != manager || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(mf.FieldsV1.Raw)); err != nil {
			return nil, false, fmt.Errorf("reading the managed fields of %s: %w", obj.GetName(), err)
		}
		owned = owned.Union(set)
		found = true
	}
	if !found {
		return nil, false, nil
	}
	out := map[string]any{}
	for p := range owned.Leaves().All() {
		copyPath(obj.Object, out, p)
	}
	return out, true, nil
}

// copyPath copies the value at path p from src into dst, creating what leads to it in dst
// (maps, and list items with their key fields). A path whose value src does not hold is
// skipped: the field was set and later removed by someone else.
func copyPath(src, dst map[string]any, p fieldpath.Path) {
	var from, to any = src, dst
	for i, pe := range p {
		last := i == len(p)-1
		switch {
		case pe.FieldName != nil:
			fm, ok1 := from.(map[string]any)
			tm, ok2 := to.(map[string]any)
			if !ok1 || !ok2 {
				return
			}
			v, ok := fm[*pe.FieldName]
			if !ok {
				return
			}
			if last {
				tm[*pe.FieldName] = runtime.DeepCopyJSONValue(v)
				return
			}
			if _, ok := tm[*pe.FieldName]; !ok {
				tm[*pe.FieldName] = emptyLike(v)
			}
			from, to = v, tm[*pe.FieldName]
		case pe.Key != nil:
			fl, ok := from.([]any)
			if !ok {
				return
			}
			item := findKeyed(fl, *pe.Key)
			if item == nil {
				return
			}
			// Lists are reached through their parent, which holds the slice: append there.
			parent, name := containerOf(dst, p[:i])
			if parent == nil {
				return
			}
			tl, _ := parent[name].([]any)
			target := findKeyed(tl, *pe.Key)
			if target == nil {
				target = map[string]any{}
				for _, f := range *pe.Key {
					target[f.Name] = runtime.DeepCopyJSONValue(item[f.Name])
				}
				parent[name] = append(tl, target)
			}
			if last {
				for k, v := range item {
					target[k] = runtime.DeepCopyJSONValue(v)
				}
				return
			}
			from, to = item, target
		case pe.Value != nil:
			// A set member is a leaf: keep it if src still has it.
			fl, ok := from.([]any)
			if !ok {
				return
			}
			parent, name := containerOf(dst, p[:i])
			if parent == nil {
				return
			}
			for _, v := range fl {
				if value.Equals(*pe.Value, value.NewValueInterface(v)) {
					tl, _ := parent[name].([]any)
					parent[name] = append(tl, runtime.DeepCopyJSONValue(v))
					return
				}
			}
			return
		default:
			// Index elements address atomic lists, which are recorded as leaves above them.
			return
		}
	}
}

// containerOf walks dst along a path of field names and keys and returns the map holding the
// path's last field, and that field's name.
func containerOf(dst map[string]any, p fieldpath.Path) (map[string]any, string) {
	var cur any = dst
	for i, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, ""
			}
			if i == len(p)-1 {
				return m, *pe.FieldName
			}
			cur = m[*pe.FieldName]
		case pe.Key != nil:
			l, _ := cur.([]any)
			item := findKeyed(l, *pe.Key)
			if item == nil {
				return nil, ""
			}
			cur = item
		default:
			return nil, ""
		}
	}
	return nil, ""
}

// findKeyed returns the map item of an associative list whose key fields equal key.
func findKeyed(list []any, key value.FieldList) map[string]any {
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		match := true
		for _, f := range key {
			v, ok := m[f.Name]
			if !ok || !value.Equals(f.Value, value.NewValueInterface(v)) {
				match = false
				break
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// emptyLike returns an empty container of v's kind, to be filled with owned fields only.
func emptyLike(v any) any {
	if _, ok := v.([]any); ok {
		return []any{}
	}
	return map[string]any{}
}

// ownedSpecs remembers, per KairosConfig and resourceVersion, the part of its spec the control
// plane set. The manager's cache drops managedFields (as Cluster API's managers do, to save
// memory), so they are read from the API server, once per KairosConfig change.
type ownedSpecs struct {
	once  sync.Once
	cache *lru.Cache
}

type ownedSpecEntry struct {
	resourceVersion string
	spec            *bootstrapv1.KairosConfigSpec
}

// ownedSpecCacheSize bounds the memory of ownedSpecs: a few thousand control-plane Machines.
const ownedSpecCacheSize = 4096

// ownedConfigSpec returns the part of a KairosConfig's spec the control plane set, or nil when
// its managedFields do not say (KairosConfigs created before the control plane named its field
// manager, which are then compared whole, as they were created).
func (r *Reconciler) ownedConfigSpec(ctx context.Context, config *bootstrapv1.KairosConfig) (*bootstrapv1.KairosConfigSpec, error) {
	r.owned.once.Do(func() { r.owned.cache = lru.New(ownedSpecCacheSize) })
	if v, ok := r.owned.cache.Get(config.UID); ok {
		if e := v.(ownedSpecEntry); e.resourceVersion == config.ResourceVersion {
			return e.spec, nil
		}
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KairosConfig"))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(config), live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading KairosConfig %s: %w", config.Name, err)
	}
	owned, found, err := ownedFields(live, fieldManager)
	if err != nil {
		return nil, err
	}
	var spec *bootstrapv1.KairosConfigSpec
	if raw, ok := owned["spec"]; found && ok {
		spec = &bootstrapv1.KairosConfigSpec{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw.(map[string]any), spec); err != nil {
			return nil, fmt.Errorf("reading the fields the control plane set on KairosConfig %s: %w", config.Name, err)
		}
	}
	// Keyed by the cached resourceVersion: that is what the next reconciliation compares.
	r.owned.cache.Add(config.UID, ownedSpecEntry{resourceVersion: config.ResourceVersion, spec: spec})
	return spec, nil
}
