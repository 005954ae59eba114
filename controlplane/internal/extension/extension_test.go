package extension

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

const (
	oldImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k3sv1.36.3-k3s1"
	newImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k3sv1.37.0-k3s1"
)

func machine(version string) clusterv1.Machine {
	return clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: "cp-abcde", Namespace: "ns"},
		Spec: clusterv1.MachineSpec{
			ClusterName: "demo",
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KairosConfig", Name: "cp-abcde",
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "KairosSimMachine", Name: "cp-abcde",
			},
		},
	}
}

func raw(t *testing.T, obj map[string]any) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

func kairosConfig(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KairosConfig",
		"metadata": map[string]any{"name": "cp-abcde", "namespace": "ns"}, "spec": spec}
}

func infraMachine(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KairosSimMachine",
		"metadata": map[string]any{"name": "cp-abcde", "namespace": "ns"}, "spec": spec}
}

func ops(t *testing.T, p runtimehooksv1.Patch) []jsonPatchOp {
	t.Helper()
	if !p.IsDefined() {
		return nil
	}
	if p.PatchType != runtimehooksv1.JSONPatchType {
		t.Fatalf("patch type %q, want JSONPatch", p.PatchType)
	}
	var out []jsonPatchOp
	if err := json.Unmarshal(p.Patch, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func canUpdate(t *testing.T, cur, des clusterv1.Machine, curBoot, desBoot, curInfra, desInfra map[string]any) *runtimehooksv1.CanUpdateMachineResponse {
	t.Helper()
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: cur, BootstrapConfig: raw(t, curBoot), InfrastructureMachine: raw(t, curInfra)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: des, BootstrapConfig: raw(t, desBoot), InfrastructureMachine: raw(t, desInfra)},
	}
	// Through JSON, as the runtime server decodes it.
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	decoded := &runtimehooksv1.CanUpdateMachineRequest{}
	if err := json.Unmarshal(data, decoded); err != nil {
		t.Fatal(err)
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	(&Handlers{}).CanUpdateMachine(context.Background(), decoded, resp)
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
		t.Fatalf("status %s: %s", resp.GetStatus(), resp.GetMessage())
	}
	return resp
}

func TestCanUpdateMachineVersionAndImage(t *testing.T) {
	infra := infraMachine(map[string]any{"cpus": int64(2)})
	resp := canUpdate(t, machine("v1.36.3"), machine("v1.37.0"),
		kairosConfig(map[string]any{"image": oldImage, "distribution": "k3s"}),
		kairosConfig(map[string]any{"image": newImage, "distribution": "k3s"}), infra, infra)
	if got := ops(t, resp.MachinePatch); len(got) != 1 || got[0] != (jsonPatchOp{Op: "replace", Path: "/spec/version", Value: "v1.37.0"}) {
		t.Errorf("machine patch %+v", got)
	}
	if got := ops(t, resp.BootstrapConfigPatch); len(got) != 1 || got[0] != (jsonPatchOp{Op: "replace", Path: "/spec/image", Value: newImage}) {
		t.Errorf("bootstrap patch %+v", got)
	}
	if resp.InfrastructureMachinePatch.IsDefined() {
		t.Errorf("infrastructure patch %s", resp.InfrastructureMachinePatch.Patch)
	}
	if strings.Contains(resp.Message, "not in place") {
		t.Errorf("message %q refuses something", resp.Message)
	}

	// An image set for the first time is an add.
	resp = canUpdate(t, machine("v1.36.3"), machine("v1.37.0"),
		kairosConfig(map[string]any{"distribution": "k3s"}), kairosConfig(map[string]any{"image": newImage, "distribution": "k3s"}), infra, infra)
	if got := ops(t, resp.BootstrapConfigPatch); len(got) != 1 || got[0].Op != "add" {
		t.Errorf("bootstrap patch %+v, want an add", got)
	}
}

func TestCanUpdateMachineRefusals(t *testing.T) {
	infra := infraMachine(map[string]any{"cpus": int64(2)})
	for _, tc := range []struct {
		name                  string
		desMachine            clusterv1.Machine
		curBoot, desBoot      map[string]any
		desInfra              map[string]any
		wantMachine, wantBoot bool
		wantRefused           string
	}{{
		name:       "infrastructure change",
		desMachine: machine("v1.37.0"),
		curBoot:    kairosConfig(map[string]any{"image": oldImage}), desBoot: kairosConfig(map[string]any{"image": newImage}),
		desInfra:    infraMachine(map[string]any{"cpus": int64(4)}),
		wantMachine: true, wantBoot: true,
		wantRefused: "infrastructure machine spec changed",
	}, {
		name:       "other KairosConfig field",
		desMachine: machine("v1.36.3"),
		curBoot:    kairosConfig(map[string]any{"image": oldImage, "files": []any{"a"}}), desBoot: kairosConfig(map[string]any{"image": oldImage, "files": []any{"b"}}),
		desInfra:    infra,
		wantRefused: "KairosConfig spec fields other than image changed",
	}, {
		name:       "version without image",
		desMachine: machine("v1.37.0"),
		curBoot:    kairosConfig(map[string]any{"image": oldImage}), desBoot: kairosConfig(map[string]any{"image": oldImage}),
		desInfra:    infra,
		wantRefused: "spec.version changed without a new KairosConfig spec.image",
	}, {
		name:       "image removed",
		desMachine: machine("v1.36.3"),
		curBoot:    kairosConfig(map[string]any{"image": oldImage}), desBoot: kairosConfig(map[string]any{}),
		desInfra:    infra,
		wantRefused: "spec.image removed",
	}, {
		name: "other Machine field",
		desMachine: func() clusterv1.Machine {
			m := machine("v1.36.3")
			m.Spec.FailureDomain = "zone-b"
			return m
		}(),
		curBoot: kairosConfig(map[string]any{"image": oldImage}), desBoot: kairosConfig(map[string]any{"image": oldImage}),
		desInfra:    infra,
		wantRefused: "Machine spec fields other than version changed",
	}, {
		name:        "not a KairosConfig",
		desMachine:  machine("v1.37.0"),
		curBoot:     map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig", "spec": map[string]any{"a": "1"}},
		desBoot:     map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig", "spec": map[string]any{"a": "1"}},
		desInfra:    infra,
		wantRefused: "not bootstrapped by Kairos",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			resp := canUpdate(t, machine("v1.36.3"), tc.desMachine, tc.curBoot, tc.desBoot, infra, tc.desInfra)
			if got := resp.MachinePatch.IsDefined(); got != tc.wantMachine {
				t.Errorf("machine patch %s, want one: %v", resp.MachinePatch.Patch, tc.wantMachine)
			}
			if got := resp.BootstrapConfigPatch.IsDefined(); got != tc.wantBoot {
				t.Errorf("bootstrap patch %s, want one: %v", resp.BootstrapConfigPatch.Patch, tc.wantBoot)
			}
			if resp.InfrastructureMachinePatch.IsDefined() {
				t.Errorf("infrastructure patch %s", resp.InfrastructureMachinePatch.Patch)
			}
			if !strings.Contains(resp.Message, "not in place") || !strings.Contains(resp.Message, tc.wantRefused) {
				t.Errorf("message %q does not refuse %q", resp.Message, tc.wantRefused)
			}
		})
	}
}

func TestCanUpdateMachineSet(t *testing.T) {
	ms := func(version string) clusterv1.MachineSet {
		return clusterv1.MachineSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
			ObjectMeta: metav1.ObjectMeta{Name: "md-0-xyz", Namespace: "ns"},
			Spec: clusterv1.MachineSetSpec{ClusterName: "demo", Replicas: ptrTo[int32](2), Template: clusterv1.MachineTemplateSpec{
				Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: version},
			}},
		}
	}
	tmpl := func(image string, extra map[string]any) map[string]any {
		spec := map[string]any{"image": image}
		for k, v := range extra {
			spec[k] = v
		}
		return map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KairosConfigTemplate",
			"spec": map[string]any{"template": map[string]any{"spec": spec}}}
	}
	infraT := func(cpus int64) map[string]any {
		return map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KairosSimMachineTemplate",
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"cpus": cpus}}}}
	}
	call := func(curBoot, desBoot, curInfra, desInfra map[string]any) *runtimehooksv1.CanUpdateMachineSetResponse {
		req := &runtimehooksv1.CanUpdateMachineSetRequest{
			Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.36.3"), BootstrapConfigTemplate: raw(t, curBoot), InfrastructureMachineTemplate: raw(t, curInfra)},
			Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.37.0"), BootstrapConfigTemplate: raw(t, desBoot), InfrastructureMachineTemplate: raw(t, desInfra)},
		}
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
		(&Handlers{}).CanUpdateMachineSet(context.Background(), req, resp)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
			t.Fatalf("status %s: %s", resp.GetStatus(), resp.GetMessage())
		}
		return resp
	}

	resp := call(tmpl(oldImage, nil), tmpl(newImage, nil), infraT(2), infraT(2))
	if got := ops(t, resp.MachineSetPatch); len(got) != 1 || got[0] != (jsonPatchOp{Op: "replace", Path: "/spec/template/spec/version", Value: "v1.37.0"}) {
		t.Errorf("machineset patch %+v", got)
	}
	if got := ops(t, resp.BootstrapConfigTemplatePatch); len(got) != 1 || got[0] != (jsonPatchOp{Op: "replace", Path: "/spec/template/spec/image", Value: newImage}) {
		t.Errorf("template patch %+v", got)
	}

	resp = call(tmpl(oldImage, map[string]any{"role": "a"}), tmpl(newImage, map[string]any{"role": "b"}), infraT(2), infraT(4))
	if resp.InfrastructureMachineTemplatePatch.IsDefined() {
		t.Errorf("infrastructure template patch %s", resp.InfrastructureMachineTemplatePatch.Patch)
	}
	for _, want := range []string{"KairosConfigTemplate spec fields other than image changed", "infrastructure machine template spec changed"} {
		if !strings.Contains(resp.Message, want) {
			t.Errorf("message %q lacks %q", resp.Message, want)
		}
	}

	// A MachineDeployment's version and its template's image meet only here (no webhook sees
	// both): an image that does not ship the version is not written to the nodes.
	wrongImage := strings.Replace(newImage, "k3sv1.37.0", "k3sv1.37.1", 1)
	resp = call(tmpl(oldImage, nil), tmpl(wrongImage, nil), infraT(2), infraT(2))
	if resp.MachineSetPatch.IsDefined() || resp.BootstrapConfigTemplatePatch.IsDefined() {
		t.Errorf("patches for an image that does not ship the version: machineset %s, template %s", resp.MachineSetPatch.Patch, resp.BootstrapConfigTemplatePatch.Patch)
	}
	want := `KairosConfigTemplate spec.image "` + wrongImage + `" ships k3s v1.37.1+k3s1, but the MachineSet template spec.version is v1.37.0: the node would refuse to start it`
	if !strings.Contains(resp.Message, want) || strings.Contains(resp.Message, "without a new") {
		t.Errorf("message %q, want it to say %q (and only that about the version)", resp.Message, want)
	}
}

func ptrTo[T any](v T) *T { return &v }

// --- UpdateMachine ---

var nodeOpUpgradeListGVK = NodeOpUpgradeGVK.GroupVersion().WithKind("NodeOpUpgradeList")

type remotes struct{ c client.Client }

func (r remotes) GetUncachedClient(context.Context, client.ObjectKey) (client.Client, error) {
	return r.c, nil
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := clusterv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

type env struct {
	h      *Handlers
	remote client.Client
}

func newEnv(t *testing.T, operator bool, nodeVersion string) *env {
	t.Helper()
	s := testScheme(t)
	m := machine("v1.37.0")
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-1"}
	mgmt := fake.NewClientBuilder().WithScheme(s).WithObjects(&m).WithStatusSubresource(&m).Build()

	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	if operator {
		mapper.Add(NodeOpUpgradeGVK, meta.RESTScopeNamespace)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{corev1.LabelHostname: "node-1"}}}
	node.Status.NodeInfo.KubeletVersion = nodeVersion
	node.Status.NodeInfo.BootID = "boot-1"
	b := fake.NewClientBuilder().WithScheme(s).WithRESTMapper(mapper).WithObjects(node)
	if !operator {
		// What a client with a REST mapper answers for a kind the API server does not serve.
		b = b.WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if obj.GetObjectKind().GroupVersionKind() == NodeOpUpgradeGVK {
					return &meta.NoKindMatchError{GroupKind: NodeOpUpgradeGVK.GroupKind(), SearchedVersions: []string{"v1alpha1"}}
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
	}
	remote := b.Build()
	return &env{h: &Handlers{Client: mgmt, Remote: remotes{remote}}, remote: remote}
}

func (e *env) update(t *testing.T, image string) *runtimehooksv1.UpdateMachineResponse {
	t.Helper()
	m := machine("v1.37.0")
	req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
		Machine:               m,
		BootstrapConfig:       raw(t, kairosConfig(map[string]any{"image": image})),
		InfrastructureMachine: raw(t, infraMachine(map[string]any{})),
	}}
	resp := &runtimehooksv1.UpdateMachineResponse{}
	e.h.UpdateMachine(context.Background(), req, resp)
	return resp
}

func (e *env) upgrades(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(nodeOpUpgradeListGVK)
	if err := e.remote.List(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func (e *env) setStatus(t *testing.T, u *unstructured.Unstructured, phase, nodePhase, nodeMessage string) {
	t.Helper()
	status := map[string]any{"phase": phase}
	if nodePhase != "" {
		ns := map[string]any{"phase": nodePhase}
		if nodeMessage != "" {
			ns["message"] = nodeMessage
		}
		status["nodeStatuses"] = map[string]any{"node-1": ns}
	}
	u.Object["status"] = status
	if err := e.remote.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

func inProgress(t *testing.T, resp *runtimehooksv1.UpdateMachineResponse) {
	t.Helper()
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || resp.GetRetryAfterSeconds() <= 0 {
		t.Fatalf("want in progress, got %s retry %d: %s", resp.GetStatus(), resp.GetRetryAfterSeconds(), resp.GetMessage())
	}
}

func TestUpdateMachineCreatesOneNodeOpUpgradeAndCompletes(t *testing.T) {
	e := newEnv(t, true, "v1.36.3+k3s1")

	inProgress(t, e.update(t, newImage))
	items := e.upgrades(t)
	if len(items) != 1 {
		t.Fatalf("%d NodeOpUpgrades, want 1", len(items))
	}
	u := items[0]
	if u.GetNamespace() != NodeOpUpgradeNamespace || u.GetName() != NodeOpUpgradeName(ptrTo(machine("")), newImage) {
		t.Errorf("NodeOpUpgrade %s/%s", u.GetNamespace(), u.GetName())
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	want := map[string]any{
		"image":         newImage,
		"nodeSelector":  map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": "node-1"}},
		"concurrency":   int64(1),
		"stopOnFailure": true,
		"upgradeActive": true,
	}
	if got, _ := json.Marshal(spec); string(got) != mustJSON(t, want) {
		t.Errorf("spec %s, want %s", got, mustJSON(t, want))
	}

	// Idempotent: repeated calls (Cluster API retries, a restarted manager) create nothing more.
	for range 3 {
		inProgress(t, e.update(t, newImage))
	}
	if n := len(e.upgrades(t)); n != 1 {
		t.Fatalf("%d NodeOpUpgrades after repeated calls, want 1", n)
	}

	// Running.
	e.setStatus(t, &u, "Running", "Running", "upgrading")
	resp := e.update(t, newImage)
	if inProgress(t, resp); !strings.Contains(resp.GetMessage(), "Running") {
		t.Errorf("message %q does not say Running", resp.GetMessage())
	}

	// Completed, but the node still reports the old version (rebooting): in progress.
	items = e.upgrades(t)
	e.setStatus(t, &items[0], "Completed", "Completed", "")
	resp = e.update(t, newImage)
	if inProgress(t, resp); !strings.Contains(resp.GetMessage(), "v1.36.3+k3s1") {
		t.Errorf("message %q does not say what the node runs", resp.GetMessage())
	}

	if bootID := items[0].GetAnnotations()[BootIDAnnotation]; bootID != "boot-1" {
		t.Errorf("boot ID annotation %q, want the Node's at creation", bootID)
	}

	// The node runs the new version: done.
	e.setNode(t, func(n *corev1.Node) {
		n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.BootID = "v1.37.0+k3s1", "boot-2"
	})
	resp = e.update(t, newImage)
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || resp.GetRetryAfterSeconds() != 0 {
		t.Fatalf("want done, got %s retry %d: %s", resp.GetStatus(), resp.GetRetryAfterSeconds(), resp.GetMessage())
	}
	if n := len(e.upgrades(t)); n != 1 {
		t.Fatalf("%d NodeOpUpgrades, want 1", n)
	}
}

// setNode changes the workload Node.
func (e *env) setNode(t *testing.T, change func(*corev1.Node)) {
	t.Helper()
	node := &corev1.Node{}
	if err := e.remote.Get(context.Background(), client.ObjectKey{Name: "node-1"}, node); err != nil {
		t.Fatal(err)
	}
	change(node)
	status := node.Status
	if err := e.remote.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	node.Status = status // Update returns the stored status
	if err := e.remote.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// completed marks the NodeOpUpgrade Completed for node-1, as the Kairos operator does once the
// node ran again after its reboot, at the given time.
func (e *env) completed(t *testing.T, at time.Time) {
	t.Helper()
	items := e.upgrades(t)
	if len(items) != 1 {
		t.Fatalf("%d NodeOpUpgrades, want 1", len(items))
	}
	u := items[0]
	u.Object["status"] = map[string]any{"phase": "Completed", "lastUpdated": at.UTC().Format(time.RFC3339),
		"nodeStatuses": map[string]any{"node-1": map[string]any{"phase": "Completed", "message": "Job and reboot completed successfully", "lastUpdated": at.UTC().Format(time.RFC3339)}}}
	if err := e.remote.Update(context.Background(), &u); err != nil {
		t.Fatal(err)
	}
}

// labelled sets what the Kairos operator's node labeler reports on node-1.
func labelled(bootState, kairosVersion, softwareVersion string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Labels[labelBootState], n.Labels[labelSoftwareVersion] = bootState, softwareVersion
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[annotationKairosVersion] = kairosVersion
	}
}

// TestUpdateMachineFallbackReportedCompleted: the Kairos operator reports a node Completed once it
// runs again after its reboot, also when boot assessment booted the previous image. A version
// change tells at once (a new boot, the old kubelet version); an image of the same version tells
// by the node labeler's labels once they are surely fresh.
func TestUpdateMachineFallbackReportedCompleted(t *testing.T) {
	t.Run("version", func(t *testing.T) {
		e := newEnv(t, true, "v1.36.3+k3s1")
		inProgress(t, e.update(t, newImage))
		e.completed(t, time.Now())
		e.setNode(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
		e.setNode(t, labelled("passive", "v3.5.0", "v1.36.3-k3s1"))
		resp := e.update(t, newImage)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusFailure {
			t.Fatalf("want Failure, got %s: %s", resp.GetStatus(), resp.GetMessage())
		}
		for _, want := range []string{"node node-1 came back from its reboot on its previous image", "its kubelet reports v1.36.3+k3s1, not v1.37.0",
			"kairos.io/boot-state=passive", newImage, "journalctl -u kairos-capi-boot-assessment.service"} {
			if !strings.Contains(resp.GetMessage(), want) {
				t.Errorf("message %q lacks %q", resp.GetMessage(), want)
			}
		}
	})

	t.Run("image", func(t *testing.T) {
		// The same Kubernetes version in a new Kairos release.
		const sameVersion = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.1-k3sv1.37.0-k3s1"
		e := newEnv(t, true, "v1.37.0+k3s1")
		e.setNode(t, labelled("active", "v3.6.0", "v1.37.0-k3s1"))
		inProgress(t, e.update(t, sameVersion))
		e.completed(t, time.Now())
		e.setNode(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
		// The labels still describe the boot before: wait.
		resp := e.update(t, sameVersion)
		if inProgress(t, resp); !strings.Contains(resp.GetMessage(), "node labeler") || !strings.Contains(resp.GetMessage(), "v3.6.1") {
			t.Errorf("message %q does not say what it waits for", resp.GetMessage())
		}
		// Passive, but the labels may be from before the reboot for a while yet: wait.
		e.setNode(t, labelled("passive", "v3.6.0", "v1.37.0-k3s1"))
		inProgress(t, e.update(t, sameVersion))
		// Long enough after the completion for the labeler to have synced: failed.
		e.completed(t, time.Now().Add(-2*labelerLag))
		resp = e.update(t, sameVersion)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusFailure || !strings.Contains(resp.GetMessage(), "previous image") ||
			!strings.Contains(resp.GetMessage(), "kairos.io/boot-state=passive, Kairos v3.6.0 with v1.37.0-k3s1") {
			t.Fatalf("want Failure naming the labels, got %s: %s", resp.GetStatus(), resp.GetMessage())
		}
		// The labels report the new release on the active image: done.
		e.setNode(t, labelled("active", "v3.6.1", "v1.37.0-k3s1"))
		if resp := e.update(t, sameVersion); resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || resp.GetRetryAfterSeconds() != 0 {
			t.Fatalf("want done, got %s retry %d: %s", resp.GetStatus(), resp.GetRetryAfterSeconds(), resp.GetMessage())
		}
	})
}

func TestUpdateMachineFailed(t *testing.T) {
	e := newEnv(t, true, "v1.36.3+k3s1")
	inProgress(t, e.update(t, newImage))
	items := e.upgrades(t)
	nodeSaid := "boot assessment failed: k3s did not start, booted the previous image"
	e.setStatus(t, &items[0], "Failed", "Failed", nodeSaid)
	resp := e.update(t, newImage)
	if resp.GetStatus() != runtimehooksv1.ResponseStatusFailure {
		t.Fatalf("want Failure, got %s: %s", resp.GetStatus(), resp.GetMessage())
	}
	if !strings.Contains(resp.GetMessage(), nodeSaid) || !strings.Contains(resp.GetMessage(), "node-1") {
		t.Errorf("message %q does not quote the node", resp.GetMessage())
	}
	// Deterministic: the same failure gives the same message.
	if again := e.update(t, newImage); again.GetMessage() != resp.GetMessage() {
		t.Errorf("messages differ: %q, %q", resp.GetMessage(), again.GetMessage())
	}
}

// TestUpdateMachineWaitsForTheOperator: without the NodeOpUpgrade API the hook waits (Success with
// a retry), saying what to install. A Failure would make Cluster API's Machine controller return
// an error and retry with exponential backoff up to 1000 s (see UpdateMachine), and show
// "please check controller logs" instead of this message.
func TestUpdateMachineWaitsForTheOperator(t *testing.T) {
	e := newEnv(t, false, "v1.36.3+k3s1")
	resp := e.update(t, newImage)
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || resp.GetRetryAfterSeconds() != operatorRetrySeconds {
		t.Fatalf("want waiting for the operator (Success, retry after %d s), got %s retry %d: %s",
			operatorRetrySeconds, resp.GetStatus(), resp.GetRetryAfterSeconds(), resp.GetMessage())
	}
	for _, want := range []string{"waiting for the Kairos operator", "kairos.io/docs/upgrade/kubernetes",
		"kubectl apply -k https://github.com/kairos-io/kairos-operator/config/default", "starts by itself"} {
		if !strings.Contains(resp.GetMessage(), want) {
			t.Errorf("message %q lacks %q", resp.GetMessage(), want)
		}
	}
}

func TestUpdateMachineNoImage(t *testing.T) {
	e := newEnv(t, true, "v1.36.3+k3s1")
	if resp := e.update(t, ""); resp.GetStatus() != runtimehooksv1.ResponseStatusFailure {
		t.Fatalf("want Failure, got %s: %s", resp.GetStatus(), resp.GetMessage())
	}
	if n := len(e.upgrades(t)); n != 0 {
		t.Fatalf("%d NodeOpUpgrades, want 0", n)
	}
}

func TestNodeOpUpgradeName(t *testing.T) {
	m := machine("")
	a, b := NodeOpUpgradeName(&m, oldImage), NodeOpUpgradeName(&m, newImage)
	if a == b || a != NodeOpUpgradeName(&m, oldImage) {
		t.Errorf("names %q %q: want deterministic per image", a, b)
	}
	m.Name = strings.Repeat("x", 80)
	if n := NodeOpUpgradeName(&m, newImage); len(n) > 63 {
		t.Errorf("name %q longer than 63", n)
	}
}

func TestSameVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"v1.37.0+k3s1", "v1.37.0", true}, {"v1.37.0+k0s", "v1.37.0+k0s.0", true}, {"v1.36.3+k3s1", "v1.37.0", false}} {
		if got := sameVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("sameVersion(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestUpdateMachineOneUpgradeOfANodeAtATime: when the desired image changes while the
// NodeOpUpgrade of the previous one still runs, no second one is created until it finished; a
// failed one does not hold the next back (that is how a corrected spec resumes).
func TestUpdateMachineOneUpgradeOfANodeAtATime(t *testing.T) {
	e := newEnv(t, true, "v1.36.3+k3s1")
	inProgress(t, e.update(t, oldImage))
	items := e.upgrades(t)
	e.setStatus(t, &items[0], "Running", "Running", "upgrading")

	resp := e.update(t, newImage)
	if inProgress(t, resp); !strings.Contains(resp.GetMessage(), items[0].GetName()) {
		t.Errorf("message %q does not name the running NodeOpUpgrade %s", resp.GetMessage(), items[0].GetName())
	}
	if n := len(e.upgrades(t)); n != 1 {
		t.Fatalf("%d NodeOpUpgrades while the first runs, want 1", n)
	}

	items = e.upgrades(t)
	e.setStatus(t, &items[0], "Failed", "Failed", "ImageBroken: the image does not boot")
	inProgress(t, e.update(t, newImage))
	if n := len(e.upgrades(t)); n != 2 {
		t.Fatalf("%d NodeOpUpgrades after the first failed, want 2", n)
	}
}

func TestUpgradeFailure(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"image": newImage}}}
	u.SetNamespace(NodeOpUpgradeNamespace)
	u.SetName("m-1")
	if _, failed := UpgradeFailure(u, "node-1"); failed {
		t.Errorf("no status: failed")
	}
	u.Object["status"] = map[string]any{"phase": "Failed", "message": "Upgrade operation failed",
		"nodeStatuses": map[string]any{"node-1": map[string]any{"phase": "Failed", "message": "ImageBroken: kernel panic"}}}
	msg, failed := UpgradeFailure(u, "node-1")
	if !failed || !strings.Contains(msg, `"ImageBroken: kernel panic"`) || !strings.Contains(msg, newImage) || !strings.Contains(msg, "default/m-1") {
		t.Errorf("UpgradeFailure = %v, %q", failed, msg)
	}
	// Without the node's message, the operator's.
	if msg, _ := UpgradeFailure(u, "node-2"); !strings.Contains(msg, "Upgrade operation failed") {
		t.Errorf("UpgradeFailure for another node = %q", msg)
	}
}
