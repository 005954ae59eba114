// Package extension is the Kairos in-place update extension: Cluster API's CanUpdateMachine,
// CanUpdateMachineSet and UpdateMachine runtime hooks (InPlaceUpdates feature gate), served by the
// control-plane manager.
//
// Sources relied on (cluster-api v1.14.2, in the module):
//   - docs/book/src/tasks/experimental-features/runtime-sdk/implement-in-place-update-hooks.md:
//     request/response shapes; extensions return per-object patches on the *current* objects for
//     the changes they can handle; Cluster API falls back to a rollout when the patched current
//     objects still differ from the desired ones.
//   - controlplane/kubeadm/reconcilers/kubeadmcontrolplane/inplace_canupdatemachine.go: a
//     response with Status Failure is an error for the caller (the reconcile is retried), not a
//     "no": so a change this extension cannot do is refused by leaving it out of the patches,
//     with Status Success, and the reason in the message.
//   - api/runtime/hooks/v1alpha1/inplaceupdate_types.go: UpdateMachine progress is
//     Success+RetryAfterSeconds>0 (in progress), Success+0 (done), Failure (failed).
//   - docs/book/src/tasks/experimental-features/runtime-sdk/implement-extensions.md: handlers are
//     idempotent, deterministic, answer quickly, and their messages carry no changing values.
package extension

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// What the extension recognises as the Kairos bootstrap provider's objects.
const (
	bootstrapGroup             = "bootstrap.cluster.x-k8s.io"
	kairosConfigKind           = "KairosConfig"
	kairosConfigTemplateKind   = "KairosConfigTemplate"
	imageField                 = "image"
	versionField               = "version"
	refuseInfrastructureReason = "a Kairos node upgrade replaces only the OS image (with k0s/k3s in it) on the same machine, " +
		"so infrastructure changes need a new Machine"
	refuseBootstrapReason = "the other KairosConfig fields are cloud-config a Kairos node reads once, at installation, " +
		"so they take effect only on a new Machine"
	refuseMachineReason = "only spec.version is upgraded in place (together with the Kairos image that carries it)"
)

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// plan is the outcome of comparing one current/desired set of objects: the JSON patches of the
// changes this extension does in place, and what it leaves to a rollout, with why.
type plan struct {
	machineOps, bootstrapOps []jsonPatchOp
	inPlace, refused         []string
}

// message is the response message: deterministic (sorted by construction, no timestamps), as
// the runtime SDK guidelines ask, since Cluster API may surface it in conditions and logs.
func (p *plan) message() string {
	var parts []string
	if len(p.inPlace) > 0 {
		parts = append(parts, "in place: "+strings.Join(p.inPlace, "; "))
	}
	if len(p.refused) > 0 {
		parts = append(parts, "not in place (Cluster API rolls the Machine out instead): "+strings.Join(p.refused, "; "))
	}
	if len(parts) == 0 {
		return "no changes"
	}
	return strings.Join(parts, ". ")
}

// fields is a generic view of one object's spec (or template spec) for the comparison.
type fields struct {
	spec map[string]any
}

// comparison names the paths of the objects one hook compares.
type comparison struct {
	// machineSpecPath is the JSON pointer of the Machine spec inside the machine object
	// ("/spec" for a Machine, "/spec/template/spec" for a MachineSet).
	machineSpecPath string
	machineWhat     string
	// bootstrapSpecPath, bootstrapKind: the same for the bootstrap object.
	bootstrapSpecPath string
	bootstrapKind     string
	infraWhat         string
}

var (
	machineComparison = comparison{
		machineSpecPath: "/spec", machineWhat: "Machine",
		bootstrapSpecPath: "/spec", bootstrapKind: kairosConfigKind,
		infraWhat: "infrastructure machine",
	}
	machineSetComparison = comparison{
		machineSpecPath: "/spec/template/spec", machineWhat: "MachineSet template",
		bootstrapSpecPath: "/spec/template/spec", bootstrapKind: kairosConfigTemplateKind,
		infraWhat: "infrastructure machine template",
	}
)

// at returns the map at a JSON pointer made of plain keys ("/spec/template/spec").
func at(obj map[string]any, pointer string) (map[string]any, bool) {
	cur := obj
	for _, k := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// without returns a shallow copy of m without key.
func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// fieldOps returns the JSON patch that makes field of the current spec equal to the desired one.
func fieldOps(specPath string, current, desired map[string]any, field string) []jsonPatchOp {
	cv, cok := current[field]
	dv, dok := desired[field]
	switch {
	case cok && dok && reflect.DeepEqual(cv, dv), !cok && !dok:
		return nil
	case !dok:
		return []jsonPatchOp{{Op: "remove", Path: specPath + "/" + field}}
	case !cok:
		return []jsonPatchOp{{Op: "add", Path: specPath + "/" + field, Value: dv}}
	default:
		return []jsonPatchOp{{Op: "replace", Path: specPath + "/" + field, Value: dv}}
	}
}

// toMap turns a typed object or a raw extension into its JSON map.
func toMap(obj any) (map[string]any, error) {
	var data []byte
	switch o := obj.(type) {
	case *runtime.RawExtension:
		switch {
		case len(o.Raw) > 0:
			data = o.Raw
		case o.Object != nil:
			var err error
			if data, err = json.Marshal(o.Object); err != nil {
				return nil, err
			}
		default:
			return map[string]any{}, nil
		}
	default:
		var err error
		if data, err = json.Marshal(o); err != nil {
			return nil, err
		}
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// str returns m[key] as a string ("" when absent or not a string).
func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// isKairos tells whether obj is the Kairos bootstrap provider's kind (any API version).
func isKairos(obj map[string]any, kind string) bool {
	gv, err := schema.ParseGroupVersion(str(obj, "apiVersion"))
	return err == nil && gv.Group == bootstrapGroup && str(obj, "kind") == kind
}

// compare decides what can be done in place between current and desired:
//   - the Kairos image (KairosConfig spec.image): the Kairos operator's NodeOpUpgrade writes it to
//     the node's passive partition and reboots into it (https://kairos.io/docs/upgrade/kubernetes/,
//     https://kairos.io/operator-docs/nodeop-upgrade/), which keeps the machine, its disk, the
//     distribution's data directory and etcd member;
//   - the Machine's spec.version, but only together with a new image: on Kairos k0s/k3s ship
//     inside the OS image, so a new version without a new image has nothing to upgrade to;
//   - nothing else: every other change is left out of the patches, so that Cluster API rolls
//     the Machine out as it would without this extension.
func compare(cmp comparison, curMachine, desMachine, curBoot, desBoot, curInfra, desInfra map[string]any) (*plan, error) {
	p := &plan{}
	curMS, _ := at(curMachine, cmp.machineSpecPath)
	desMS, _ := at(desMachine, cmp.machineSpecPath)
	if curMS == nil || desMS == nil {
		return nil, fmt.Errorf("%s has no %s", cmp.machineWhat, cmp.machineSpecPath)
	}

	kairos := isKairos(desBoot, cmp.bootstrapKind) && isKairos(curBoot, cmp.bootstrapKind)
	var curBS, desBS map[string]any
	if kairos {
		curBS, _ = at(curBoot, cmp.bootstrapSpecPath)
		desBS, _ = at(desBoot, cmp.bootstrapSpecPath)
		if curBS == nil {
			curBS = map[string]any{}
		}
		if desBS == nil {
			desBS = map[string]any{}
		}
	}

	// The image.
	imageChanges, imageMismatch := false, false
	if kairos {
		if ops := fieldOps(cmp.bootstrapSpecPath, curBS, desBS, imageField); len(ops) > 0 {
			desImage := str(desBS, imageField)
			desVersion := str(desMS, versionField)
			img, parsed := syntax.ParseKairosImage(desImage)
			switch {
			case desImage == "":
				p.refused = append(p.refused, fmt.Sprintf("%s spec.image removed: an upgrade needs an image to write to the node", cmp.bootstrapKind))
			case parsed && desVersion != "" && !syntax.ImageShipsVersion(img.SoftwareVersion(), desVersion):
				// The KairosControlPlane's webhook refuses such a pair; a MachineDeployment's version
				// and its KairosConfigTemplate's image meet only here. Upgraded anyway, the node
				// would refuse to start the distribution (and fall back), or the update would
				// wait for a kubelet version that never comes.
				imageMismatch = true
				p.refused = append(p.refused, fmt.Sprintf("%s spec.image %q ships %s %s, but the %s spec.version is %s: the node would refuse to start it; use the image of %s",
					cmp.bootstrapKind, desImage, img.Distribution, img.SoftwareVersion(), cmp.machineWhat, desVersion, desVersion))
			default:
				imageChanges = true
				if _, ok := at(curBoot, cmp.bootstrapSpecPath); !ok {
					// The current object has no spec at all (nothing else set): add it whole.
					ops = []jsonPatchOp{{Op: "add", Path: cmp.bootstrapSpecPath, Value: map[string]any{imageField: desImage}}}
				}
				p.bootstrapOps = append(p.bootstrapOps, ops...)
				p.inPlace = append(p.inPlace, fmt.Sprintf("%s spec.image %q -> %q", cmp.bootstrapKind, str(curBS, imageField), desImage))
			}
		}
		if !reflect.DeepEqual(without(curBS, imageField), without(desBS, imageField)) {
			p.refused = append(p.refused, fmt.Sprintf("%s spec fields other than image changed: %s", cmp.bootstrapKind, refuseBootstrapReason))
		}
	} else if !reflect.DeepEqual(specOf(curBoot), specOf(desBoot)) {
		p.refused = append(p.refused, "the bootstrap config is not a Kairos "+cmp.bootstrapKind+" and changed")
	}

	// The version.
	if ops := fieldOps(cmp.machineSpecPath, curMS, desMS, versionField); len(ops) > 0 {
		switch {
		case !kairos:
			p.refused = append(p.refused, cmp.machineWhat+" spec.version changed on a Machine that is not bootstrapped by Kairos")
		case imageMismatch: // said above
		case !imageChanges:
			p.refused = append(p.refused, fmt.Sprintf("%s spec.version changed without a new %s spec.image: on Kairos, k0s and k3s ship inside the OS image, so the version changes in place only with the image that carries it",
				cmp.machineWhat, cmp.bootstrapKind))
		default:
			p.machineOps = append(p.machineOps, ops...)
			p.inPlace = append(p.inPlace, fmt.Sprintf("%s spec.version %q -> %q", cmp.machineWhat, str(curMS, versionField), str(desMS, versionField)))
		}
	}
	if !reflect.DeepEqual(without(curMS, versionField), without(desMS, versionField)) {
		p.refused = append(p.refused, fmt.Sprintf("%s spec fields other than version changed: %s", cmp.machineWhat, refuseMachineReason))
	}

	// The infrastructure: never in place.
	if !reflect.DeepEqual(specOf(curInfra), specOf(desInfra)) {
		p.refused = append(p.refused, fmt.Sprintf("%s spec changed: %s", cmp.infraWhat, refuseInfrastructureReason))
	}
	return p, nil
}

func specOf(obj map[string]any) any {
	if obj == nil {
		return nil
	}
	return obj["spec"]
}

// patchOf encodes ops as a runtime hook patch (none when there is nothing to patch).
func patchOf(ops []jsonPatchOp) (runtimehooksv1.Patch, error) {
	if len(ops) == 0 {
		return runtimehooksv1.Patch{}, nil
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return runtimehooksv1.Patch{}, err
	}
	return runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: data}, nil
}

// CanUpdateMachine answers whether the Machine's changes can be done in place. It is called by a
// control plane (KCP, or ours once it follows the contract) for one Machine.
func (h *Handlers) CanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) {
	fail := func(err error) {
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage("reading the CanUpdateMachine request: " + err.Error())
	}
	maps, err := mapsOf(&req.Current.Machine, &req.Desired.Machine, &req.Current.BootstrapConfig, &req.Desired.BootstrapConfig,
		&req.Current.InfrastructureMachine, &req.Desired.InfrastructureMachine)
	if err != nil {
		fail(err)
		return
	}
	p, err := compare(machineComparison, maps[0], maps[1], maps[2], maps[3], maps[4], maps[5])
	if err != nil {
		fail(err)
		return
	}
	if resp.MachinePatch, err = patchOf(p.machineOps); err == nil {
		resp.BootstrapConfigPatch, err = patchOf(p.bootstrapOps)
	}
	if err != nil {
		fail(err)
		return
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.SetMessage(p.message())
}

// CanUpdateMachineSet answers the same for every Machine of a MachineSet: it compares the
// MachineSet's template, the KairosConfigTemplate and the infrastructure machine template
// (spec.template.spec of each, as the hook's documentation says).
func (h *Handlers) CanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) {
	fail := func(err error) {
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage("reading the CanUpdateMachineSet request: " + err.Error())
	}
	maps, err := mapsOf(&req.Current.MachineSet, &req.Desired.MachineSet, &req.Current.BootstrapConfigTemplate, &req.Desired.BootstrapConfigTemplate,
		&req.Current.InfrastructureMachineTemplate, &req.Desired.InfrastructureMachineTemplate)
	if err != nil {
		fail(err)
		return
	}
	// Only spec.template.spec of the infrastructure template matters (the hook's documentation).
	for _, i := range []int{4, 5} {
		if ts, ok := at(maps[i], "/spec/template/spec"); ok {
			maps[i] = map[string]any{"spec": ts}
		}
	}
	p, err := compare(machineSetComparison, maps[0], maps[1], maps[2], maps[3], maps[4], maps[5])
	if err != nil {
		fail(err)
		return
	}
	if resp.MachineSetPatch, err = patchOf(p.machineOps); err == nil {
		resp.BootstrapConfigTemplatePatch, err = patchOf(p.bootstrapOps)
	}
	if err != nil {
		fail(err)
		return
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.SetMessage(p.message())
}

func mapsOf(objs ...any) ([]map[string]any, error) {
	out := make([]map[string]any, len(objs))
	for i, o := range objs {
		m, err := toMap(o)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}
