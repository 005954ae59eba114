package fleet

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API semantics of writes, on objects decoded as JSON maps. They follow the API server's
// generic registry (k8s.io/apiserver/pkg/registry/generic/registry/store.go) where the managers
// can tell the difference: server-set metadata, optimistic concurrency, status subresources, no
// new resourceVersion (and no watch event) for a write that changes nothing, finalizers holding
// a deletion, and the one validation rule the managers rely on (a Node's providerID cannot
// change once set). Admission, defaulting and the rest of validation are not modelled.

type object = map[string]any

func (r *resource) gr() schema.GroupResource {
	return schema.GroupResource{Group: r.group, Resource: r.plural}
}

func (r *resource) gk() schema.GroupKind {
	return schema.GroupKind{Group: r.group, Kind: r.kind}
}

func decodeObject(b []byte) (object, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // keeps integers exact in custom resources
	var o object
	if err := d.Decode(&o); err != nil {
		return nil, err
	}
	if o == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return o, nil
}

func metadata(o object) object {
	m, _ := o["metadata"].(object)
	if m == nil {
		m = object{}
		o["metadata"] = m
	}
	return m
}

func str(m object, k string) string {
	s, _ := m[k].(string)
	return s
}

// encode turns a finished object into what the store keeps: built-in kinds go through their
// Go type, which drops unknown fields and refuses malformed ones.
func (r *resource) encode(o object) (*entry, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", r.kind, err)
	}
	if r.typed != nil {
		t := r.typed()
		if err := json.Unmarshal(b, t); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding %s: %v", r.kind, err))
		}
		if b, err = json.Marshal(t); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", r.kind, err)
		}
	}
	e := &entry{data: b}
	if l, ok := metadata(o)["labels"].(object); ok && len(l) > 0 {
		e.labels = make(map[string]string, len(l))
		for k, v := range l {
			s, ok := v.(string)
			if !ok {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("label %s is not a string", k))
			}
			e.labels[k] = s
		}
	}
	return e, nil
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

const nameChars = "bcdfghjklmnpqrstvwxz2456789"

func generateSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = nameChars[int(b[i])%len(nameChars)]
	}
	return string(b[:])
}

// checkType refuses an object of another kind than the path's.
func (r *resource) checkType(o object) error {
	if k := str(o, "kind"); k != "" && k != r.kind {
		return apierrors.NewBadRequest(fmt.Sprintf("the object's kind %s does not match %s", k, r.kind))
	}
	if v := str(o, "apiVersion"); v != "" && v != r.apiVersion() {
		return apierrors.NewBadRequest(fmt.Sprintf("the object's apiVersion %s does not match %s", v, r.apiVersion()))
	}
	o["kind"], o["apiVersion"] = r.kind, r.apiVersion()
	return nil
}

// create stores a new object. The caller holds the store's lock.
func (c *Cluster) create(r *resource, namespace string, o object) ([]byte, error) {
	if err := r.checkType(o); err != nil {
		return nil, err
	}
	md := metadata(o)
	name := str(md, "name")
	if name == "" {
		if gn := str(md, "generateName"); gn != "" {
			name = gn + generateSuffix()
		} else {
			return nil, apierrors.NewInvalid(r.gk(), "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
		}
	}
	if ns := str(md, "namespace"); r.namespaced && ns != "" && ns != namespace {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if r.namespaced {
		if c.store.get(objKey{res: c.res.index[resNamespaces], name: namespace}) == nil {
			return nil, apierrors.NewNotFound(resNamespaces.gr(), namespace)
		}
		md["namespace"] = namespace
	} else {
		delete(md, "namespace")
	}
	k := objKey{res: c.res.index[r], namespace: namespace, name: name}
	if c.store.get(k) != nil {
		return nil, apierrors.NewAlreadyExists(r.gr(), name)
	}
	rv := c.store.nextRV()
	md["name"] = name
	md["uid"] = newUID()
	md["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	md["resourceVersion"] = strconv.FormatUint(rv, 10)
	delete(md, "deletionTimestamp")
	delete(md, "deletionGracePeriodSeconds")
	if r.bumpsGeneration {
		md["generation"] = 1
	}
	if r.status && r.typed == nil {
		delete(o, "status") // custom resources with a status subresource drop it on create
	}
	if r == resNamespaces {
		o["status"] = object{"phase": "Active"}
	}
	e, err := r.encode(o)
	if err != nil {
		c.store.rv-- // nothing was written
		return nil, err
	}
	e.rv = rv
	c.store.commit(added, k, rv, e, nil, nil)
	return e.data, nil
}

// update replaces an object with o (PUT, or the result of a patch), on the main resource or
// its status subresource. The caller holds the store's lock.
func (c *Cluster) update(r *resource, namespace, name string, o object, subresource string, fromPatch bool) ([]byte, error) {
	if err := r.checkType(o); err != nil {
		return nil, err
	}
	k := objKey{res: c.res.index[r], namespace: namespace, name: name}
	cur := c.store.get(k)
	if cur == nil {
		return nil, apierrors.NewNotFound(r.gr(), name)
	}
	old, err := decodeObject(cur.data)
	if err != nil {
		return nil, fmt.Errorf("decoding the stored %s %s: %w", r.kind, name, err)
	}
	md := metadata(o)
	if n := str(md, "name"); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, name))
	}
	switch rv := str(md, "resourceVersion"); {
	case rv == "" && r.conditionalUpdate && !fromPatch:
		return nil, apierrors.NewInvalid(r.gk(), name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "", "must be specified for an update")})
	case rv != "" && rv != strconv.FormatUint(cur.rv, 10):
		return nil, apierrors.NewConflict(r.gr(), name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	oldMD := metadata(old)
	if subresource == "status" {
		// Only the status changes through /status.
		st, ok := o["status"]
		o = old
		if ok {
			o["status"] = st
		} else {
			delete(o, "status")
		}
		md = metadata(o)
	} else if r.status {
		if st, ok := old["status"]; ok {
			o["status"] = st
		} else {
			delete(o, "status")
		}
	}
	for _, f := range []string{"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"} {
		if v, ok := oldMD[f]; ok {
			md[f] = v
		} else {
			delete(md, f)
		}
	}
	md["name"] = name
	if r.namespaced {
		md["namespace"] = namespace
	} else {
		delete(md, "namespace")
	}
	if r == resNodes {
		if err := checkProviderID(old, o, name); err != nil {
			return nil, err
		}
	}
	if r.bumpsGeneration && !sameOutsideMetadata(old, o) {
		g, _ := strconv.ParseInt(fmt.Sprint(oldMD["generation"]), 10, 64)
		md["generation"] = g + 1
	}
	md["resourceVersion"] = strconv.FormatUint(cur.rv, 10)
	e, err := r.encode(o)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(e.data, cur.data) {
		// A write that changes nothing gets no new resourceVersion and no watch event.
		return cur.data, nil
	}
	if _, deleting := md["deletionTimestamp"]; deleting && len(finalizers(md)) == 0 {
		return c.remove(r, k, cur, o)
	}
	rv := c.store.nextRV()
	md["resourceVersion"] = strconv.FormatUint(rv, 10)
	if e, err = r.encode(o); err != nil {
		c.store.rv--
		return nil, err
	}
	e.rv = rv
	c.store.commit(modified, k, rv, e, nil, cur)
	return e.data, nil
}

func finalizers(md object) []any {
	f, _ := md["finalizers"].([]any)
	return f
}

// sameOutsideMetadata says whether two objects differ only in metadata and status.
func sameOutsideMetadata(a, b object) bool {
	strip := func(o object) object {
		out := object{}
		for k, v := range o {
			if k != "metadata" && k != "status" {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// checkProviderID is the Node validation the bootstrap provider relies on: a provider ID can
// be set once and never changed (k8s.io/kubernetes/pkg/apis/core/validation, ValidateNodeUpdate).
func checkProviderID(old, o object, name string) error {
	get := func(x object) string {
		spec, _ := x["spec"].(object)
		return str(spec, "providerID")
	}
	if prev, next := get(old), get(o); prev != "" && prev != next {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, name, field.ErrorList{
			field.Forbidden(field.NewPath("spec", "providerID"), `node updates may not change providerID except from "" to valid`),
		})
	}
	return nil
}

// patch applies a patch to an object and stores the result as an update.
func (c *Cluster) patch(r *resource, namespace, name string, pt types.PatchType, body []byte, subresource string) ([]byte, error) {
	cur := c.store.get(objKey{res: c.res.index[r], namespace: namespace, name: name})
	if cur == nil {
		return nil, apierrors.NewNotFound(r.gr(), name)
	}
	var patched []byte
	var err error
	switch pt {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(cur.data, body)
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(body); err == nil {
			patched, err = p.Apply(cur.data)
		}
	case types.StrategicMergePatchType:
		if r.typed == nil {
			// As the API server answers for custom resources.
			return nil, apierrors.NewGenericServerResponse(415, "patch", r.gr(), name,
				"strategic merge patch is not supported for custom resources", 0, false)
		}
		patched, err = strategicpatch.StrategicMergePatch(cur.data, body, r.typed())
	default:
		// Server-side apply is not served: neither Cluster API's ClusterCache users nor the
		// kairos-capi managers apply to workload clusters (doc.go).
		return nil, apierrors.NewGenericServerResponse(415, "patch", r.gr(), name,
			fmt.Sprintf("the simulated API server does not serve patch type %q", pt), 0, false)
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("applying the %s patch: %v", pt, err))
	}
	o, err := decodeObject(patched)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object: %v", err))
	}
	return c.update(r, namespace, name, o, subresource, true)
}

// delete deletes an object, or marks it deleted while finalizers hold it.
func (c *Cluster) delete(r *resource, namespace, name string, opts *metav1.DeleteOptions) ([]byte, error) {
	k := objKey{res: c.res.index[r], namespace: namespace, name: name}
	cur := c.store.get(k)
	if cur == nil {
		return nil, apierrors.NewNotFound(r.gr(), name)
	}
	o, err := decodeObject(cur.data)
	if err != nil {
		return nil, fmt.Errorf("decoding the stored %s %s: %w", r.kind, name, err)
	}
	md := metadata(o)
	if opts != nil && opts.Preconditions != nil {
		if p := opts.Preconditions.UID; p != nil && string(*p) != str(md, "uid") {
			return nil, apierrors.NewConflict(r.gr(), name, fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p, str(md, "uid")))
		}
		if p := opts.Preconditions.ResourceVersion; p != nil && *p != str(md, "resourceVersion") {
			return nil, apierrors.NewConflict(r.gr(), name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p, str(md, "resourceVersion")))
		}
	}
	if len(finalizers(md)) > 0 {
		if _, deleting := md["deletionTimestamp"]; deleting {
			return cur.data, nil
		}
		md["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
		md["deletionGracePeriodSeconds"] = 0
		rv := c.store.nextRV()
		md["resourceVersion"] = strconv.FormatUint(rv, 10)
		e, err := r.encode(o)
		if err != nil {
			c.store.rv--
			return nil, err
		}
		e.rv = rv
		c.store.commit(modified, k, rv, e, nil, cur)
		return e.data, nil
	}
	return c.remove(r, k, cur, o)
}

// remove drops an object; its watch event carries the deletion's resourceVersion.
func (c *Cluster) remove(r *resource, k objKey, cur *entry, o object) ([]byte, error) {
	rv := c.store.nextRV()
	metadata(o)["resourceVersion"] = strconv.FormatUint(rv, 10)
	e, err := r.encode(o)
	if err != nil {
		c.store.rv--
		return nil, err
	}
	c.store.commit(deleted, k, rv, nil, e.data, cur)
	return e.data, nil
}
