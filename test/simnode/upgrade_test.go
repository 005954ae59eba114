package simnode_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	commoncc "github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestKairosImageNames reads and builds Kairos image references, and applies the version skew
// rules a booting image is held to.
func TestKairosImageNames(t *testing.T) {
	for _, tc := range []struct {
		ref     string
		dist    render.Distribution
		version string
		kairos  string
	}{
		{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1", render.K3s, "v1.36.3+k3s1", "v3.5.0"},
		{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.36.3-k0s.0", render.K0s, "v1.36.3+k0s.0", "v3.5.0"},
		{"quay.io/kairos/ubuntu:22.04-standard-arm64-generic-v0.0.1-k3sv1.35.0-k3s1", render.K3s, "v1.35.0+k3s1", "v0.0.1"},
		{"registry.local:5000/kairos/ubuntu:24.04-standard-amd64-generic-v3.2.4-36-g24ca209-k3sv1.32.0-k3s1", render.K3s, "v1.32.0+k3s1", "v3.2.4-36-g24ca209"},
		{"quay.io/kairos/alpine:3.21-core-amd64-generic-v3.5.0", "", "", "v3.5.0"},
	} {
		img, err := simnode.ParseImage(tc.ref)
		if err != nil {
			t.Errorf("%s: %v", tc.ref, err)
			continue
		}
		if img.Distribution != tc.dist || img.Version != tc.version || img.KairosVersion != tc.kairos {
			t.Errorf("%s: %+v", tc.ref, img)
		}
	}
	for _, bad := range []string{"quay.io/kairos/ubuntu", "quay.io/kairos/ubuntu:latest", "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0"} {
		if _, err := simnode.ParseImage(bad); err == nil {
			t.Errorf("%s was read as a Kairos image", bad)
		}
	}
	if got, want := simnode.KairosImage(render.K3s, "v1.36.3"), "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1"; got != want {
		t.Errorf("KairosImage = %s, want %s", got, want)
	}
	if got, want := simnode.KairosImage(render.K0s, "v1.37.0+k0s.1"), "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.37.0-k0s.1"; got != want {
		t.Errorf("KairosImage = %s, want %s", got, want)
	}
}

// TestNodeOpUpgradeCRDMirrorsKairosOperator: the simulated NodeOpUpgrade CRD has exactly the
// fields the simulation mirrors from kairos-io/kairos-operator api/v1alpha1 (nodeopupgrade_types.go
// at simnode.KairosOperatorTypesCommit, NodeStatus of nodeop_types.go at
// simnode.KairosOperatorNodeStatusCommit), with their JSON names and types.
func TestNodeOpUpgradeCRDMirrorsKairosOperator(t *testing.T) {
	if simnode.KairosOperatorRelease != "v0.1.3" || simnode.KairosOperatorTypesCommit != "0e76a6f25438974e1bc543e93bf19590d263c63d" || simnode.KairosOperatorNodeStatusCommit != "0878f24405d7cabdff7a0a374bfb5daf44dcc06d" {
		t.Fatalf("the mirrored commits changed: review the fields below against them")
	}
	crd := simnode.NodeOpUpgradeCRD()
	if crd.Spec.Group != "operator.kairos.io" || crd.Spec.Names.Kind != "NodeOpUpgrade" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped ||
		len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" || crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("CRD identity: %+v", crd.Spec)
	}
	got := map[string]string{}
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		got[path] = s.Type
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(path+".*", *s.AdditionalProperties.Schema)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", *s.Items.Schema)
		}
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, top := range []string{"spec", "status"} {
		walk(top, root.Properties[top])
	}
	want := map[string]string{
		"spec": "object", "spec.image": "string", "spec.concurrency": "integer", "spec.stopOnFailure": "boolean",
		"spec.upgradeActive": "boolean", "spec.upgradeRecovery": "boolean", "spec.force": "boolean",
		// metav1.LabelSelector
		"spec.nodeSelector": "object", "spec.nodeSelector.matchLabels": "object", "spec.nodeSelector.matchLabels.*": "string",
		"spec.nodeSelector.matchExpressions": "array", "spec.nodeSelector.matchExpressions[]": "object",
		"spec.nodeSelector.matchExpressions[].key": "string", "spec.nodeSelector.matchExpressions[].operator": "string",
		"spec.nodeSelector.matchExpressions[].values": "array", "spec.nodeSelector.matchExpressions[].values[]": "string",
		"status": "object", "status.phase": "string", "status.message": "string", "status.lastUpdated": "string",
		"status.nodeStatuses": "object", "status.nodeStatuses.*": "object", "status.nodeStatuses.*.phase": "string",
		"status.nodeStatuses.*.message": "string", "status.nodeStatuses.*.lastUpdated": "string",
	}
	var diff []string
	for k, v := range want {
		if got[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q, want %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, "unexpected field "+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("the CRD schema differs from the mirrored fields:\n%s", strings.Join(diff, "\n"))
	}
	if req := root.Properties["spec"].Required; len(req) != 1 || req[0] != "image" {
		t.Errorf("spec.required = %v, want [image] (+required in the types)", req)
	}
	if req := root.Properties["status"].Properties["nodeStatuses"].AdditionalProperties.Schema.Required; len(req) != 1 || req[0] != "phase" {
		t.Errorf("NodeStatus required = %v, want [phase]", req)
	}
}

// TestKairosUpgrade upgrades a single control-plane node of each distribution in place through
// the simulated Kairos operator, v1.36.3 -> v1.37.0: the node reboots into the new image and comes
// back as the same etcd member (same member ID, same data: an object written before is still
// there), the same Node (UID, provider ID) whose kubelet reports v1.37.0, and the NodeOpUpgrade is
// Completed; the document's boot assessment armed that first boot, then verified the release and
// cleared GRUB's variables, and a plain reboot of the verified release does not arm. Then images
// a real node would not run: a broken image (GRUB's own rule falls back to the passive image), an
// image of the other distribution and an image two minors ahead (the document's verify step
// reboots the armed boot, GRUB falls back); each leaves the node on v1.37.0, its verified release
// unchanged and its NodeOpUpgrade Failed with the node's reason. After a fallback GRUB keeps
// booting the fallback entry, also for the next upgrade, until the variables are cleared.
func TestKairosUpgrade(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			start := time.Now()
			w := newWorld(t, reg, dist)
			cp := w.start("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}), "")
			waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
			c := reg.Cluster(w.endpointString())
			admin := c.AdminClient()
			build := "+k3s1"
			if dist == render.K0s {
				build = "+k0s.0"
			}
			oldImage := simnode.KairosImage(dist, version)
			if active, passive := cp.Images(); active != oldImage || passive != "" {
				t.Fatalf("images before the upgrade: %q, %q; want %q and none", active, passive, oldImage)
			}
			// The first boot ever: verified once ready, nothing armed.
			if ba := cp.BootAssessment(); ba != (simnode.BootAssessment{VerifiedRelease: releaseOf(t, oldImage)}) {
				t.Errorf("boot assessment after the first boot: %+v", ba)
			}
			before := node(t, admin, "cp-0")
			if before.Status.NodeInfo.KubeletVersion != kubeletVersionOf(dist, version+build) || before.Status.NodeInfo.OSImage != "Ubuntu 24.04 LTS" {
				t.Fatalf("nodeInfo before the upgrade: %+v", before.Status.NodeInfo)
			}
			members := c.EtcdMembers()
			if len(members) != 1 {
				t.Fatalf("etcd members %+v", members)
			}
			if err := admin.Create(w.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before-upgrade"}}); err != nil {
				t.Fatal(err)
			}
			// No operator until it is installed, as in a real workload cluster.
			if err := admin.List(w.ctx, nodeOpUpgradeList()); err == nil {
				t.Fatal("NodeOpUpgrades are served before the operator was installed")
			}
			if err := c.InstallKairosOperator(w.ctx); err != nil {
				t.Fatal(err)
			}

			newImage := simnode.KairosImage(dist, "v1.37.0")
			up := createNodeOpUpgrade(t, admin, "to-v1-37-0", newImage)
			waitNodeOpUpgrade(t, admin, up, simnode.NodeOpPhaseCompleted, 3*time.Minute)
			t.Logf("%s: upgraded after %s", dist, time.Since(start))
			if s := nodeStatusOf(t, admin, up, "cp-0"); s["phase"] != simnode.NodeOpPhaseCompleted {
				t.Errorf("nodeStatuses[cp-0] = %v", s)
			}
			if err := cp.LastUpgrade(); err != nil {
				t.Errorf("the node's upgrade ended with %v", err)
			}
			// The node labeler reports the new image's release, booted from the active entry.
			framework.Eventually(t, 30*time.Second, func() error {
				n := node(t, admin, "cp-0")
				if n.Labels[simnode.NodeLabelBootState] != "active" || n.Labels[simnode.NodeLabelSoftwarePrefix] != string(dist) ||
					n.Labels[simnode.NodeLabelSoftwareVersion] != strings.ReplaceAll("v1.37.0"+build, "+", "-") {
					return fmt.Errorf("the node labeler's labels %v", n.Labels)
				}
				return nil
			})
			after := node(t, admin, "cp-0")
			if after.UID != before.UID || after.Spec.ProviderID != before.Spec.ProviderID || after.Spec.Unschedulable {
				t.Errorf("Node after the upgrade: uid %s (was %s), providerID %q (was %q), unschedulable %v",
					after.UID, before.UID, after.Spec.ProviderID, before.Spec.ProviderID, after.Spec.Unschedulable)
			}
			if want := kubeletVersionOf(dist, "v1.37.0"+build); after.Status.NodeInfo.KubeletVersion != want {
				t.Errorf("kubeletVersion %s, want %s", after.Status.NodeInfo.KubeletVersion, want)
			}
			if after.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID {
				t.Error("the boot ID did not change with the reboot")
			}
			if m := c.EtcdMembers(); len(m) != 1 || m[0].MemberID != members[0].MemberID || m[0].Name != members[0].Name {
				t.Errorf("etcd members after the upgrade %+v, before %+v", m, members)
			}
			if err := admin.Get(w.ctx, client.ObjectKey{Namespace: "default", Name: "before-upgrade"}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("the object written before the upgrade: %v", err)
			}
			if active, passive := cp.Images(); active != newImage || passive != oldImage || cp.RunningImage() != newImage {
				t.Errorf("images after the upgrade: %q, %q, running %q", active, passive, cp.RunningImage())
			}
			if rel, err := cp.ReadFile("/etc/kairos-release"); err != nil || !strings.Contains(string(rel), `KAIROS_SOFTWARE_VERSION="v1.37.0`+build+`"`) {
				t.Errorf("/etc/kairos-release after the upgrade: %q %v", rel, err)
			}
			// The new release's first boot was armed, then verified and cleared.
			verified := simnode.BootAssessment{Armed: true, VerifiedRelease: releaseOf(t, newImage)}
			if ba := cp.BootAssessment(); ba != verified {
				t.Errorf("boot assessment after the upgrade: %+v, want %+v", ba, verified)
			}
			waitReady(t, admin, "cp-0")

			// A reboot of the verified release: GRUB boots it, nothing is armed.
			if err := cp.Reboot(w.ctx); err != nil {
				t.Fatalf("reboot: %v", err)
			}
			verified.Armed = false
			if ba := cp.BootAssessment(); ba != verified || cp.RunningImage() != newImage {
				t.Errorf("boot assessment after a reboot: %+v, want %+v; running %s", ba, verified, cp.RunningImage())
			}
			waitReady(t, admin, "cp-0")

			// Images that must not end up running. Each boot fails, boot assessment falls back.
			broken := simnode.KairosImage(dist, "v1.37.1")
			reg.BreakImage(broken)
			other := render.K3s
			if dist == render.K3s {
				other = render.K0s
			}
			// Each after the fallback of the one before, with nothing cleared on the node: the
			// document's after-upgrade step clears GRUB's boot_assessment_tentative, so each image
			// is tried (its own reason, after the time its failure takes), not skipped for the
			// earlier failure (PreviousBootFailed: TestBootAssessmentWithoutDocumentSteps).
			for _, tc := range []struct {
				name, image, reason string
				// wait is how long the failure takes at least.
				wait time.Duration
			}{
				{"broken", broken, simnode.ReasonImageBroken, simnode.BootAssessmentPeriod},
				{"other-distribution", simnode.KairosImage(other, "v1.37.0"), simnode.ReasonDistributionMismatch, simnode.VerifyTimeout},
				{"two-minors", simnode.KairosImage(dist, "v1.39.0"), simnode.ReasonVersionSkew, simnode.VerifyTimeout},
			} {
				failedAt := time.Now()
				u := createNodeOpUpgrade(t, admin, tc.name, tc.image)
				// As the Kairos operator (v0.1.3) does: the node ran again after its reboot, so
				// the upgrade is Completed; what it booted, only the node and its Node tell.
				waitNodeOpUpgrade(t, admin, u, simnode.NodeOpPhaseCompleted, 3*time.Minute)
				var bf *simnode.BootFailure
				if err := cp.LastUpgrade(); !errors.As(err, &bf) || bf.Reason != tc.reason {
					t.Errorf("%s: the node's upgrade ended with %v, want a fallback for %s", tc.name, err, tc.reason)
				}
				t.Logf("%s: %s after %s: the operator says %q, the node %v", dist, tc.name, time.Since(failedAt).Round(time.Second),
					nodeStatusOf(t, admin, u, "cp-0")["message"], cp.LastUpgrade())
				framework.Eventually(t, 30*time.Second, func() error {
					n := node(t, admin, "cp-0")
					if n.Labels[simnode.NodeLabelBootState] != "passive" || n.Annotations[simnode.NodeAnnotationKairosVersion] != simnode.DefaultKairosVersion {
						return fmt.Errorf("the node labeler's labels %v, annotations %v: want boot state passive", n.Labels, n.Annotations)
					}
					return nil
				})
				if time.Since(failedAt) < tc.wait {
					t.Errorf("%s: failed after %s, before the %s a real node takes", tc.name, time.Since(failedAt), tc.wait)
				}
				if active, passive := cp.Images(); active != tc.image || passive != newImage || cp.RunningImage() != newImage {
					t.Errorf("%s: images %q, %q, running %q; want the failed image active and the node back on its passive one", tc.name, active, passive, cp.RunningImage())
				}
				// GRUB booted the fallback entry and keeps both variables; the verified release is
				// still the one the node runs.
				if ba, want := cp.BootAssessment(), (simnode.BootAssessment{Enable: true, Tentative: true, UpgradeFailure: true, VerifiedRelease: releaseOf(t, newImage)}); ba != want {
					t.Errorf("%s: boot assessment after the fallback %+v, want %+v", tc.name, ba, want)
				}
				n := node(t, admin, "cp-0")
				if want := kubeletVersionOf(dist, "v1.37.0"+build); n.Status.NodeInfo.KubeletVersion != want {
					t.Errorf("%s: kubeletVersion %s after the fallback, want %s", tc.name, n.Status.NodeInfo.KubeletVersion, want)
				}
				if n.Spec.Unschedulable {
					t.Errorf("%s: the node stayed cordoned, but the operator uncordons a node that ran again after its reboot", tc.name)
				}
				if m := c.EtcdMembers(); len(m) != 1 || m[0].MemberID != members[0].MemberID {
					t.Errorf("%s: etcd members after the fallback %+v", tc.name, m)
				}
				waitReady(t, admin, "cp-0")
			}
			t.Logf("%s took %s", dist, time.Since(start))
		})
	}
}

// TestKairosOperatorStartsWithItsCRD: a workload cluster nobody installed the operator in through
// the simulation (no Cluster.InstallKairosOperator) gets it as a real cluster does, once a user
// applies the operator's manifests to its API server: the simulated operator then labels the
// Node and carries out a NodeOpUpgrade, here a k3s node's upgrade to v1.37.0 (README, "Upgrading
// in place": the k3s walk-through). Until then nothing acts: no node label, no NodeOpUpgrade API.
func TestKairosOperatorStartsWithItsCRD(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	w := newWorld(t, reg, render.K3s)
	cp := w.start("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}), "")
	waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	admin := reg.Cluster(w.endpointString()).AdminClient()
	if n := node(t, admin, "cp-0"); n.Labels[simnode.NodeLabelKairosManaged] != "" {
		t.Fatalf("the node labeler ran before the operator was deployed: labels %v", n.Labels)
	}
	if err := admin.List(w.ctx, nodeOpUpgradeList()); err == nil {
		t.Fatal("NodeOpUpgrades are served before the operator's manifests were applied")
	}

	// kubectl apply -f of the manifests, as the sandbox's user does.
	manifests, err := simnode.KairosOperatorManifests()
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifests, &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(w.ctx, crd); err != nil {
		t.Fatal(err)
	}
	image := simnode.KairosImage(render.K3s, "v1.37.0")
	up := createNodeOpUpgrade(t, admin, "to-v1-37-0", image)
	waitNodeOpUpgrade(t, admin, up, simnode.NodeOpPhaseCompleted, 3*time.Minute)
	if want := kubeletVersionOf(render.K3s, "v1.37.0+k3s1"); node(t, admin, "cp-0").Status.NodeInfo.KubeletVersion != want || cp.RunningImage() != image {
		t.Errorf("after the NodeOpUpgrade: kubelet %s, image %s; want %s, %s", node(t, admin, "cp-0").Status.NodeInfo.KubeletVersion, cp.RunningImage(), want, image)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		if n := node(t, admin, "cp-0"); n.Labels[simnode.NodeLabelKairosManaged] != "true" || n.Labels[simnode.NodeLabelBootState] != "active" {
			return fmt.Errorf("the node labeler's labels %v", n.Labels)
		}
		return nil
	})
}

// releaseOf is the /etc/kairos-release triple of an image, what the boot assessment verifies.
func releaseOf(t *testing.T, ref string) string {
	t.Helper()
	img, err := simnode.ParseImage(ref)
	if err != nil {
		t.Fatal(err)
	}
	return img.KairosVersion + "-" + string(img.Distribution) + img.Version
}

func kubeletVersionOf(dist render.Distribution, installed string) string {
	if dist == render.K0s {
		v, _, _ := strings.Cut(installed, "+")
		return v + "+k0s"
	}
	return installed
}

func nodeOpUpgradeList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(simnode.NodeOpUpgradeGVK.GroupVersion().WithKind("NodeOpUpgradeList"))
	return l
}

func createNodeOpUpgrade(t *testing.T, c client.Client, name, image string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(simnode.NodeOpUpgradeGVK)
	u.SetNamespace("default")
	u.SetName(name)
	u.Object["spec"] = map[string]any{
		"image":         image,
		"nodeSelector":  map[string]any{"matchLabels": map[string]any{corev1.LabelHostname: "cp-0"}},
		"concurrency":   int64(1),
		"stopOnFailure": true,
	}
	framework.Eventually(t, time.Minute, func() error { return c.Create(context.Background(), u) })
	return u
}

func getNodeOpUpgrade(c client.Client, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(simnode.NodeOpUpgradeGVK)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return got, c.Get(ctx, client.ObjectKeyFromObject(u), got)
}

func waitNodeOpUpgrade(t *testing.T, c client.Client, u *unstructured.Unstructured, phase string, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() error {
		got, err := getNodeOpUpgrade(c, u)
		if err != nil {
			return err
		}
		if p, _, _ := unstructured.NestedString(got.Object, "status", "phase"); p != phase {
			status, _, _ := unstructured.NestedMap(got.Object, "status")
			return fmt.Errorf("NodeOpUpgrade %s: status %v, want phase %s", u.GetName(), status, phase)
		}
		return nil
	})
}

func nodeStatusOf(t *testing.T, c client.Client, u *unstructured.Unstructured, node string) map[string]any {
	t.Helper()
	got, err := getNodeOpUpgrade(c, u)
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedMap(got.Object, "status", "nodeStatuses", node)
	return s
}

func waitReady(t *testing.T, c client.Client, name string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() error {
		n := &corev1.Node{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("Node %s is not Ready: %+v", name, n.Status.Conditions)
	})
}

// TestDocumentImage: a node whose infrastructure boots an older image than its bootstrap
// document names (a Machine created after its siblings were upgraded in place, from a template
// that still clones the old disk) upgrades to the document's image and reboots before its
// distribution starts, and runs that image's version; the upgrade is refused like any other when
// the image ships the other distribution or a version k0s/k3s cannot move to.
func TestDocumentImage(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	// The infrastructure's image: an older Kairos release and the previous Kubernetes minor.
	oldImage := func(dist render.Distribution, k8s string) string {
		return strings.Replace(simnode.KairosImage(dist, k8s), "-v3.5.0-", "-v3.4.0-", 1)
	}
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			w := newWorld(t, reg, dist)
			want := simnode.KairosImage(dist, version)
			from := oldImage(dist, "v1.35.2")
			doc := w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0", Image: want})
			cp, err := reg.StartNode(simnode.NodeSpec{Namespace: "test", Name: "cp-0", Endpoint: w.endpointString(), Data: doc, Image: from})
			if err != nil {
				t.Fatal(err)
			}
			waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
			if active, passive := cp.Images(); active != want || passive != from || cp.RunningImage() != want {
				t.Errorf("images: active %q, passive %q, running %q; want %q, %q, %q", active, passive, cp.RunningImage(), want, from, want)
			}
			if cp.ImageReboots() != 1 {
				t.Errorf("image reboots = %d, want 1", cp.ImageReboots())
			}
			build := "+k3s1"
			if dist == render.K0s {
				build = "+k0s.0"
			}
			if got := cp.InstalledVersion(); got != version+build {
				t.Errorf("installed %s, want %s", got, version+build)
			}
			admin := reg.Cluster(w.endpointString()).AdminClient()
			if n := node(t, admin, "cp-0"); n.Status.NodeInfo.KubeletVersion != kubeletVersionOf(dist, version+build) {
				t.Errorf("kubeletVersion %s, want %s", n.Status.NodeInfo.KubeletVersion, kubeletVersionOf(dist, version+build))
			}
			if rel, err := cp.ReadFile("/etc/kairos-release"); err != nil || !strings.Contains(string(rel), `KAIROS_VERSION="v3.5.0"`) {
				t.Errorf("/etc/kairos-release: %q %v", rel, err)
			}

			// A node already on the document's image does not upgrade.
			same := w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-x", Image: want})
			other := render.K3s
			if dist == render.K3s {
				other = render.K0s
			}
			for _, tc := range []struct {
				name, boots, image, reason string
			}{
				{"other distribution", from, simnode.KairosImage(other, version), simnode.ReasonDistributionMismatch},
				{"skips a minor", oldImage(dist, "v1.34.2"), want, simnode.ReasonVersionSkew},
			} {
				d := w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-x", Image: tc.image})
				if tc.image == want {
					d = same
				}
				n, err := reg.StartNode(simnode.NodeSpec{Namespace: "test", Name: "refused-" + strings.ReplaceAll(tc.name, " ", "-"), Endpoint: w.endpointString(), Data: d, Image: tc.boots})
				if err != nil {
					t.Fatal(err)
				}
				waitPhase(t, n, simnode.PhaseRefused, tc.reason, time.Minute)
				if n.RunningImage() != tc.boots || n.ImageReboots() != 0 {
					t.Errorf("%s: running %q after %d image reboots, want %q and none", tc.name, n.RunningImage(), n.ImageReboots(), tc.boots)
				}
				t.Logf("%s: %s", tc.name, n.Status().Message)
			}
		})
	}
}

// withoutBootAssessment returns the document without kairos-capi's boot assessment steps (its
// boot.before arm step and the network step that starts the verify unit), as documents of
// earlier releases were.
func withoutBootAssessment(t *testing.T, doc []byte) []byte {
	t.Helper()
	c, err := commoncc.Unmarshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	delete(c.Stages, "boot.before")
	delete(c.Stages, commoncc.StageAfterUpgrade)
	var network []commoncc.Step
	for _, st := range c.Stages[commoncc.StageNetwork] {
		if !strings.Contains(strings.Join(st.Commands, "\n"), render.BootAssessmentUnit) {
			network = append(network, st)
		}
	}
	if len(network) == len(c.Stages[commoncc.StageNetwork]) {
		t.Fatal("the document has no verify step")
	}
	c.Stages[commoncc.StageNetwork] = network
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBootAssessmentWithoutDocumentSteps: Kairos' boot assessment alone, for a document without
// kairos-capi's arm, verify and upgrade steps. An image that does not boot falls back by GRUB's
// own rule, and the next upgrade goes straight to the fallback entry until the variables are
// cleared on the node; an image that boots but whose k3s refuses to start (it ships k0s) counts as a good boot: the
// node stays on it, not running its distribution, and GRUB's variables are cleared.
func TestBootAssessmentWithoutDocumentSteps(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	w := newWorld(t, reg, render.K3s)
	doc := withoutBootAssessment(t, w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}))
	cp := w.start("cp-0", doc, "")
	waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	if ba := cp.BootAssessment(); ba != (simnode.BootAssessment{}) {
		t.Errorf("boot assessment without the steps: %+v, want nothing recorded", ba)
	}
	oldImage := simnode.KairosImage(render.K3s, version)

	broken := simnode.KairosImage(render.K3s, "v1.37.1")
	reg.BreakImage(broken)
	err := cp.Upgrade(w.ctx, broken)
	var bf *simnode.BootFailure
	if !errors.As(err, &bf) || bf.Reason != simnode.ReasonImageBroken || bf.Fallback != oldImage {
		t.Fatalf("upgrade to a broken image: %v, want a fallback to %s", err, oldImage)
	}
	if cp.RunningImage() != oldImage || cp.Status().Phase != simnode.PhaseRunning {
		t.Errorf("after the fallback: running %s, %s", cp.RunningImage(), cp)
	}
	if ba := cp.BootAssessment(); !ba.Enable || !ba.Tentative || !ba.UpgradeFailure || ba.Armed {
		t.Errorf("boot assessment after the fallback: %+v", ba)
	}

	// GRUB still holds the failure: without the document's after-upgrade step the next upgrade
	// is not even tried, whatever its image, until someone clears the variables on the node.
	good := simnode.KairosImage(render.K3s, "v1.37.0")
	if err := cp.Upgrade(w.ctx, good); !errors.As(err, &bf) || bf.Reason != simnode.ReasonPreviousBootFailed || bf.Image != good || cp.RunningImage() != oldImage {
		t.Fatalf("upgrade after a fallback: %v, running %s; want %s and the node back on %s", err, cp.RunningImage(), simnode.ReasonPreviousBootFailed, oldImage)
	}
	cp.ClearBootAssessment()
	k0sImage := simnode.KairosImage(render.K0s, "v1.37.0")
	err = cp.Upgrade(w.ctx, k0sImage)
	var df *simnode.DistributionFailure
	if !errors.As(err, &df) || df.Reason != simnode.ReasonDistributionMismatch || df.Image != k0sImage {
		t.Fatalf("upgrade to an image without k3s: %v, want a DistributionFailure", err)
	}
	t.Logf("%v", err)
	if s := cp.Status(); s.Phase != simnode.PhaseRefused || s.Reason != simnode.ReasonDistributionMismatch || cp.RunningImage() != k0sImage {
		t.Errorf("after the upgrade: running %s, %s; want the new image, refused", cp.RunningImage(), cp)
	}
	if ba := cp.BootAssessment(); ba != (simnode.BootAssessment{}) {
		t.Errorf("boot assessment after a good boot without the steps: %+v, want cleared", ba)
	}
	if rel, _ := cp.ReadFile("/etc/kairos-release"); !strings.Contains(string(rel), `KAIROS_SOFTWARE_VERSION_PREFIX="k0s"`) {
		t.Errorf("/etc/kairos-release is not the new image's: %s", rel)
	}
}
