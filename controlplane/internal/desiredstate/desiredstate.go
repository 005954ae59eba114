// Package desiredstate computes what the control plane creates for a Machine: its name and
// its KairosConfig spec. The reconciler creates Machines from it and the admission webhooks
// check with it that a KairosControlPlane's naming template and embedded KairosConfig spec
// will work, so both agree by construction.
package desiredstate

import (
	"fmt"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/util/validation"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// MachineName renders a machine naming template (the default one when empty) and checks the
// result is a valid Machine name. A Machine's name is its node's hostname, a DNS label, while the
// names of a Cluster and a KairosControlPlane are DNS subdomains: their dots become hyphens.
func MachineName(tmpl, clusterName, controlPlaneName, random string) (string, error) {
	clusterName = strings.ReplaceAll(clusterName, ".", "-")
	controlPlaneName = strings.ReplaceAll(controlPlaneName, ".", "-")
	if tmpl == "" {
		tmpl = controlplanev1.DefaultMachineNamingTemplate
	}
	t, err := template.New("name").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("is not a valid Go template: %v", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, map[string]any{
		"cluster":            map[string]string{"name": clusterName},
		"kairosControlPlane": map[string]string{"name": controlPlaneName},
		"random":             random,
	}); err != nil {
		return "", fmt.Errorf("cannot be rendered (use .cluster.name, .kairosControlPlane.name and .random): %v", err)
	}
	name := b.String()
	// Too long for a Machine name (long cluster or control-plane names): trimmed, with the
	// random part at the end, as Cluster API names the Machines of a kubeadm control plane
	// (internal/topology/names, templateGenerator.GenerateName).
	if len(name) > validation.DNS1123LabelMaxLength && len(random) < validation.DNS1123LabelMaxLength {
		name = name[:validation.DNS1123LabelMaxLength-len(random)] + random
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return "", fmt.Errorf("renders %q, which is not a valid Machine name: %s", name, strings.Join(msgs, "; "))
	}
	return name, nil
}

// RequestedKairosConfigSpec is the KairosConfig spec the control plane asks for a Machine built
// from base (the inline kairosConfigSpec or the referenced template's spec): base and the fields
// the provider owns, role, distribution, single-node mode and the etcd snapshots of
// spec.etcd.snapshots, without defaults. The installed bootstrap provider's webhook defaults the
// rest, so a control plane newer than the bootstrap provider never sends a field only its own
// defaults would set (and a KairosConfig without snapshots never carries the field at all).
func RequestedKairosConfigSpec(base *bootstrapv1.KairosConfigSpec, distribution bootstrapv1.Distribution, singleNode bool, snapshots *bootstrapv1.EtcdSnapshots) *bootstrapv1.KairosConfigSpec {
	spec := base.DeepCopy()
	spec.Role = bootstrapv1.RoleControlPlane
	spec.Distribution = distribution
	spec.SingleNode = singleNode
	spec.EtcdSnapshots = snapshots.DeepCopy()
	return spec
}

// KairosConfigSpec is the requested spec with this release's defaults applied: what Machines
// are compared with (both sides defaulted, so that releases that only add defaults roll
// nothing) and what admission validates.
func KairosConfigSpec(base *bootstrapv1.KairosConfigSpec, distribution bootstrapv1.Distribution, singleNode bool, snapshots *bootstrapv1.EtcdSnapshots) *bootstrapv1.KairosConfigSpec {
	spec := RequestedKairosConfigSpec(base, distribution, singleNode, snapshots)
	spec.Default()
	return spec
}
