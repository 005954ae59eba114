package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
)

func (e *env) getConfig(name string) *bootstrapv1.KairosConfig {
	e.t.Helper()
	c := &bootstrapv1.KairosConfig{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// listConfigs lists the KairosConfigs of the test namespace.
func (e *env) listConfigs() []bootstrapv1.KairosConfig {
	e.t.Helper()
	l := &bootstrapv1.KairosConfigList{}
	if err := e.c.List(context.Background(), l, client.InNamespace(testNS)); err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// listInfras lists the infrastructure machines of the test namespace.
func (e *env) listInfras() []unstructured.Unstructured {
	e.t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(infraGV.WithKind(infraKind + "List"))
	if err := e.c.List(context.Background(), l, client.InNamespace(testNS)); err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// getInfra reads an infrastructure machine; nil when it does not exist.
func (e *env) getInfra(name string) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(infraGV.String())
	u.SetKind(infraKind)
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, u); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		e.t.Fatal(err)
	}
	return u
}

func TestCreateMachineShape(t *testing.T) {
	for _, tc := range []struct {
		name           string
		replicas       int32
		dist           bootstrapv1.Distribution
		naming         string
		wantName       *regexp.Regexp
		wantSingleNode bool
	}{
		{name: "single node k0s, default naming", replicas: 1, dist: bootstrapv1.DistributionK0s,
			wantName: regexp.MustCompile(`^demo-cp-[a-z0-9]{5}$`), wantSingleNode: true},
		{name: "three k3s nodes, custom naming", replicas: 3, dist: bootstrapv1.DistributionK3s,
			naming: "{{ .cluster.name }}-control-{{ .random }}", wantName: regexp.MustCompile(`^demo-control-[a-z0-9]{5}$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t).replicas(tc.replicas)
			f.kcp.Spec.Distribution = tc.dist
			f.kcp.Spec.MachineNaming.Template = tc.naming
			f.kcp.Spec.MachineTemplate.ObjectMeta = clusterv1.ObjectMeta{
				Labels:      map[string]string{"tier": "control"},
				Annotations: map[string]string{"example.com/owner": "team-a"},
			}
			f.kcp.Spec.MachineTemplate.Spec.ReadinessGates = []clusterv1.MachineReadinessGate{{ConditionType: "example.com/Healthy"}}
			f.kcp.Spec.MachineTemplate.Spec.Deletion = controlplanev1.KairosControlPlaneMachineTemplateDeletionSpec{
				NodeDrainTimeoutSeconds: ptr.To[int32](60), NodeVolumeDetachTimeoutSeconds: ptr.To[int32](120), NodeDeletionTimeoutSeconds: ptr.To[int32](30),
			}
			e := f.build()
			s := e.scope(ctx)
			if err := e.r.createMachine(ctx, s, "fd-2", map[string]string{"extra": "x"}); err != nil {
				t.Fatal(err)
			}
			created := e.newMachines()
			if len(created) != 1 {
				t.Fatalf("created %d Machines", len(created))
			}
			m := created[0]
			if !tc.wantName.MatchString(m.Name) {
				t.Errorf("name %q does not match %s", m.Name, tc.wantName)
			}
			wantLabels := map[string]string{
				clusterv1.ClusterNameLabel: clusterName, clusterv1.MachineControlPlaneLabel: "", controlplanev1.ControlPlaneNameLabel: kcpName, "tier": "control",
			}
			if !reflect.DeepEqual(m.Labels, wantLabels) {
				t.Errorf("Machine labels = %v, want %v", m.Labels, wantLabels)
			}
			wantAnnotations := map[string]string{"example.com/owner": "team-a", "extra": "x", controlplanev1.EtcdMemberHookAnnotation: ""}
			if !reflect.DeepEqual(m.Annotations, wantAnnotations) {
				t.Errorf("Machine annotations = %v, want %v", m.Annotations, wantAnnotations)
			}
			if len(m.OwnerReferences) != 1 || !ptr.Deref(m.OwnerReferences[0].Controller, false) ||
				m.OwnerReferences[0].Kind != "KairosControlPlane" || m.OwnerReferences[0].Name != kcpName || m.OwnerReferences[0].UID != f.kcp.UID ||
				m.OwnerReferences[0].APIVersion != controlplanev1.GroupVersion.String() {
				t.Errorf("Machine owner references = %+v, want the KairosControlPlane as controller", m.OwnerReferences)
			}
			wantSpec := clusterv1.MachineSpec{
				ClusterName: clusterName,
				Version:     testVersion,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: m.Name}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: infraKind, Name: m.Name},
				FailureDomain:     "fd-2",
				ReadinessGates:    []clusterv1.MachineReadinessGate{{ConditionType: "example.com/Healthy"}},
				Deletion: clusterv1.MachineDeletionSpec{
					NodeDrainTimeoutSeconds: ptr.To[int32](60), NodeVolumeDetachTimeoutSeconds: ptr.To[int32](120), NodeDeletionTimeoutSeconds: ptr.To[int32](30),
				},
				MinReadySeconds: ptr.To[int32](0),
			}
			if !reflect.DeepEqual(m.Spec, wantSpec) {
				t.Errorf("Machine spec =\n%+v\nwant\n%+v", m.Spec, wantSpec)
			}

			// KairosConfig: same name and metadata, owned (not controlled) by the control plane.
			config := e.getConfig(m.Name)
			wantOwner := metav1.OwnerReference{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KairosControlPlane", Name: kcpName, UID: f.kcp.UID}
			if !reflect.DeepEqual(config.OwnerReferences, []metav1.OwnerReference{wantOwner}) {
				t.Errorf("KairosConfig owner references = %+v, want %+v", config.OwnerReferences, wantOwner)
			}
			if !reflect.DeepEqual(config.Labels, wantLabels) || !reflect.DeepEqual(config.Annotations, map[string]string{"example.com/owner": "team-a"}) {
				t.Errorf("KairosConfig metadata = %v / %v", config.Labels, config.Annotations)
			}
			// What the control plane asks for and no more: the installed bootstrap provider's
			// webhook (absent here) defaults the rest.
			wantConfig := f.kcp.Spec.KairosConfigSpec.DeepCopy()
			wantConfig.Role, wantConfig.Distribution, wantConfig.SingleNode = bootstrapv1.RoleControlPlane, tc.dist, tc.wantSingleNode
			if !equality.Semantic.DeepEqual(&config.Spec, wantConfig) {
				t.Errorf("KairosConfig spec =\n%+v\nwant\n%+v", config.Spec, *wantConfig)
			}
			if config.Spec.UserName != "" || config.Spec.UserPassword != "s3cret" {
				t.Errorf("KairosConfig spec defaulted by the control plane, or user input lost: %+v", config.Spec)
			}
			// Defaulted, it is what the control plane compares Machines with.
			config.Spec.Default()
			if want := desiredstate.KairosConfigSpec(&f.kcp.Spec.KairosConfigSpec, tc.dist, tc.wantSingleNode, f.kcp.Spec.Etcd.Snapshots); !reflect.DeepEqual(&config.Spec, want) {
				t.Errorf("defaulted KairosConfig spec =\n%+v\nwant\n%+v", config.Spec, *want)
			}

			// Infrastructure machine: cloned from the template, at the contract's version.
			infra := e.getInfra(m.Name)
			if infra == nil {
				t.Fatal("no infrastructure machine")
			}
			if size, _, _ := unstructured.NestedString(infra.Object, "spec", "size"); size != "small" {
				t.Errorf("infrastructure machine spec.size = %q, want the template's", size)
			}
			if !reflect.DeepEqual(infra.GetOwnerReferences(), []metav1.OwnerReference{wantOwner}) {
				t.Errorf("infrastructure machine owner references = %+v", infra.GetOwnerReferences())
			}
			if !reflect.DeepEqual(infra.GetLabels(), wantLabels) {
				t.Errorf("infrastructure machine labels = %v", infra.GetLabels())
			}
			a := infra.GetAnnotations()
			if a[clusterv1.TemplateClonedFromNameAnnotation] != templateName || a[clusterv1.TemplateClonedFromGroupKindAnnotation] != templateKind+"."+infraGroup ||
				a["example.com/owner"] != "team-a" {
				t.Errorf("infrastructure machine annotations = %v", a)
			}

			// What was just created is up to date.
			s2 := e.scope(ctx)
			if ok, why := s2.upToDate(s2.machines[m.Name]); !ok {
				t.Errorf("a new Machine is outdated: %q", why)
			}
		})
	}
}

func TestCreateMachineErrors(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name          string
		setup         func(f *fixture)
		wantErr       string
		wantInfraErr  string
		wantInfraLeft bool
	}{
		{name: "infrastructure CRD missing",
			setup:        func(f *fixture) { f.noCRDs = true },
			wantErr:      "reading the CRD of TestMachineTemplate.infrastructure.cluster.x-k8s.io",
			wantInfraErr: "reading the CRD of TestMachineTemplate.infrastructure.cluster.x-k8s.io"},
		{name: "infrastructure CRD without a contract label",
			setup: func(f *fixture) {
				f.noCRDs = true
				crd := crdObject(templateKind)
				crd.SetLabels(map[string]string{"example.com/other": "v1beta1"})
				f.objs = append(f.objs, crd)
			},
			wantErr:      "no cluster.x-k8s.io/v1beta2 or /v1beta1 contract label",
			wantInfraErr: "no cluster.x-k8s.io/v1beta2 or /v1beta1 contract label"},
		{name: "infrastructure template missing",
			setup: func(f *fixture) {
				f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "missing"
			},
			wantErr:      "cloning the infrastructure template TestMachineTemplate missing",
			wantInfraErr: "TestMachineTemplate missing does not exist"},
		{name: "invalid naming template",
			setup:   func(f *fixture) { f.kcp.Spec.MachineNaming.Template = "{{ .nope }}" },
			wantErr: "spec.machineNaming.template"},
		{name: "KairosConfig creation fails: nothing else is created",
			setup: func(f *fixture) {
				f.interceptor = &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if obj.GetObjectKind().GroupVersionKind().Kind == "KairosConfig" {
						return errBoom
					}
					return c.Create(ctx, obj, opts...)
				}}
			},
			wantErr: "creating KairosConfig"},
		{name: "Machine creation fails: the KairosConfig and infrastructure machine are removed",
			setup: func(f *fixture) {
				f.interceptor = &interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
					return errBoom // Machines are the only objects applied
				}}
			},
			wantErr: "creating Machine"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			tc.setup(f)
			e := f.build()
			s := e.scope(ctx)
			err := e.r.createMachine(ctx, s, "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("createMachine error = %v, want %q", err, tc.wantErr)
			}
			containsAll(t, "infraTemplateErr", s.infraTemplateErr, tc.wantInfraErr)
			if tc.wantInfraErr == "" && s.infraTemplateErr != "" {
				t.Errorf("infraTemplateErr = %q, want none", s.infraTemplateErr)
			}
			if n := len(e.listMachines()); n != 0 {
				t.Errorf("%d Machines left", n)
			}
			infras := &unstructured.UnstructuredList{}
			infras.SetGroupVersionKind(infraGV.WithKind(infraKind + "List"))
			if err := e.c.List(ctx, infras); err != nil {
				t.Fatal(err)
			}
			if len(infras.Items) != 0 {
				t.Errorf("%d infrastructure machines left behind", len(infras.Items))
			}
			configs := &bootstrapv1.KairosConfigList{}
			if err := e.c.List(ctx, configs); err != nil {
				t.Fatal(err)
			}
			if len(configs.Items) != 0 {
				t.Errorf("%d KairosConfigs left behind", len(configs.Items))
			}
		})
	}
}

func TestAPIVersionFor(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct{ label, want string }{
		{"v1beta2", "infrastructure.cluster.x-k8s.io/v1beta2"},
		{"v1alpha3_v1alpha4_v1beta1", "infrastructure.cluster.x-k8s.io/v1beta1"},
		// Only the v1beta1 contract (CAPK v0.11): its latest version there.
		{"v1beta1=v1alpha1", "infrastructure.cluster.x-k8s.io/v1alpha1"},
	} {
		crd := crdObject(infraKind)
		key, label := "cluster.x-k8s.io/v1beta2", tc.label
		if k, v, ok := strings.Cut(tc.label, "="); ok {
			key, label = "cluster.x-k8s.io/"+k, v
		}
		crd.SetLabels(map[string]string{key: label})
		f := newFixture(t)
		f.noCRDs = true
		f.objs = append(f.objs, crd)
		e := f.build()
		got, err := apiVersionFor(ctx, e.c, schema.GroupKind{Group: infraGroup, Kind: infraKind})
		if err != nil || got != tc.want {
			t.Errorf("apiVersionFor with label %q = %q, %v; want %q", tc.label, got, err, tc.want)
		}
	}
}

func TestSyncMachines(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.Spec.MachineTemplate.ObjectMeta.Labels = map[string]string{"tier": "control"}
	f.machine("m1", 3*time.Hour, withAnnotation("keep", "me"))
	f.machine("m2", 2*time.Hour)
	f.machine("gone", time.Hour, deleting(time.Minute, ""))
	// m2 was cloned from another template: outdated.
	f.infras["m2"].SetAnnotations(map[string]string{
		clusterv1.TemplateClonedFromNameAnnotation:      "cp-old",
		clusterv1.TemplateClonedFromGroupKindAnnotation: templateKind + "." + infraGroup,
	})

	// What changed since, none of which needs a rollout.
	f.kcp.Spec.MachineTemplate.ObjectMeta = clusterv1.ObjectMeta{
		Labels:      map[string]string{"tier": "cp", "zone": "eu"},
		Annotations: map[string]string{"example.com/owner": "team-b"},
	}
	f.kcp.Spec.MachineTemplate.Spec.Deletion = controlplanev1.KairosControlPlaneMachineTemplateDeletionSpec{
		NodeDrainTimeoutSeconds: ptr.To[int32](300), NodeVolumeDetachTimeoutSeconds: ptr.To[int32](60), NodeDeletionTimeoutSeconds: ptr.To[int32](10),
	}
	f.kcp.Spec.MachineTemplate.Spec.ReadinessGates = []clusterv1.MachineReadinessGate{{ConditionType: "example.com/Healthy"}}
	e := f.build()

	res, err := e.r.syncMachines(ctx, e.scope(ctx))
	if err != nil || !res.IsZero() {
		t.Fatalf("syncMachines = %+v, %v", res, err)
	}
	if n := len(e.listMachines()); n != 3 || len(e.newMachines()) != 0 || len(e.deletedMachines()) != 0 {
		t.Fatalf("syncMachines created or deleted Machines: %d now", n)
	}
	wantDeletion := clusterv1.MachineDeletionSpec{
		NodeDrainTimeoutSeconds: ptr.To[int32](300), NodeVolumeDetachTimeoutSeconds: ptr.To[int32](60), NodeDeletionTimeoutSeconds: ptr.To[int32](10),
	}
	for _, name := range []string{"m1", "m2"} {
		m := e.getMachine(name)
		if m.Labels["tier"] != "cp" || m.Labels["zone"] != "eu" || m.Labels[clusterv1.ClusterNameLabel] != clusterName || m.Labels[controlplanev1.ControlPlaneNameLabel] != kcpName {
			t.Errorf("%s labels = %v", name, m.Labels)
		}
		if m.Annotations["example.com/owner"] != "team-b" || !hasHook(m) {
			t.Errorf("%s annotations = %v", name, m.Annotations)
		}
		if !reflect.DeepEqual(m.Spec.Deletion, wantDeletion) {
			t.Errorf("%s deletion = %+v, want %+v", name, m.Spec.Deletion, wantDeletion)
		}
		if len(m.Spec.ReadinessGates) != 1 || m.Spec.ReadinessGates[0].ConditionType != "example.com/Healthy" {
			t.Errorf("%s readiness gates = %+v", name, m.Spec.ReadinessGates)
		}
		if ptr.Deref(m.Spec.MinReadySeconds, -1) != 0 {
			t.Errorf("%s minReadySeconds = %v", name, m.Spec.MinReadySeconds)
		}
		if m.Spec.Version != testVersion || m.Spec.InfrastructureRef.Name != name {
			t.Errorf("%s spec changed beyond what syncs: %+v", name, m.Spec)
		}
		config := e.getConfig(name)
		if config.Labels["tier"] != "cp" || config.Labels["zone"] != "eu" || config.Annotations["example.com/owner"] != "team-b" {
			t.Errorf("KairosConfig %s metadata = %v / %v", name, config.Labels, config.Annotations)
		}
		infra := e.getInfra(name)
		if infra.GetLabels()["tier"] != "cp" || infra.GetAnnotations()["example.com/owner"] != "team-b" {
			t.Errorf("infrastructure machine %s metadata = %v / %v", name, infra.GetLabels(), infra.GetAnnotations())
		}
		if infra.GetAnnotations()[clusterv1.TemplateClonedFromNameAnnotation] == "" {
			t.Errorf("infrastructure machine %s lost its cloned-from annotation", name)
		}
	}
	if e.getMachine("m1").Annotations["keep"] != "me" {
		t.Error("an annotation the control plane does not manage was dropped")
	}

	up := conditions.Get(e.getMachine("m1"), clusterv1.MachineUpToDateCondition)
	if up == nil || up.Status != metav1.ConditionTrue || up.Reason != clusterv1.MachineUpToDateReason {
		t.Errorf("m1 UpToDate = %+v, want True/%s", up, clusterv1.MachineUpToDateReason)
	}
	out := conditions.Get(e.getMachine("m2"), clusterv1.MachineUpToDateCondition)
	if out == nil || out.Status != metav1.ConditionFalse || out.Reason != clusterv1.MachineNotUpToDateReason ||
		out.Message != "* infrastructure template cp-old, want cp-small" {
		t.Errorf("m2 UpToDate = %+v, want False/%s with the reason", out, clusterv1.MachineNotUpToDateReason)
	}
	// Deleting Machines are left alone.
	gone := e.getMachine("gone")
	if gone.Labels["zone"] != "" || conditions.Get(gone, clusterv1.MachineUpToDateCondition) != nil || gone.Spec.Deletion.NodeDrainTimeoutSeconds != nil {
		t.Errorf("deleting Machine was synced: %v %+v", gone.Labels, gone.Spec.Deletion)
	}
	if e.getConfig("gone").Labels["zone"] != "" {
		t.Error("KairosConfig of a deleting Machine was synced")
	}

	// A second pass changes nothing: no needless writes.
	before := map[string]string{}
	for _, name := range []string{"m1", "m2"} {
		before["m/"+name] = e.getMachine(name).ResourceVersion
		before["c/"+name] = e.getConfig(name).ResourceVersion
		before["i/"+name] = e.getInfra(name).GetResourceVersion()
	}
	if _, err := e.r.syncMachines(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m1", "m2"} {
		after := map[string]string{
			"m/" + name: e.getMachine(name).ResourceVersion,
			"c/" + name: e.getConfig(name).ResourceVersion,
			"i/" + name: e.getInfra(name).GetResourceVersion(),
		}
		for k, v := range after {
			if before[k] != v {
				t.Errorf("%s was written again without a change (%s -> %s)", k, before[k], v)
			}
		}
	}
}

func TestSyncMachinesUpToDateReasons(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	f.kcp.Spec.Version = "v1.32.0"
	f.kcp.Spec.KairosConfigSpec.UserName = "ops"
	e := f.build()
	if _, err := e.r.syncMachines(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	c := conditions.Get(e.getMachine("m1"), clusterv1.MachineUpToDateCondition)
	want := "* version v1.31.2, want v1.32.0\n* KairosConfig spec changed"
	if c == nil || c.Status != metav1.ConditionFalse || c.Message != want {
		t.Errorf("UpToDate = %+v, want False with %q", c, want)
	}
}

// Labels and annotations dropped from spec.machineTemplate.metadata leave the Machines
// (server-side apply), labels others set stay, and a sync with nothing to change sends nothing.
func TestSyncMachinesRemovesDroppedMetadata(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).replicas(1)
	f.kcp.Spec.MachineTemplate.ObjectMeta = clusterv1.ObjectMeta{
		Labels:      map[string]string{"tier": "cp", "zone": "eu"},
		Annotations: map[string]string{"example.com/owner": "team-b", "example.com/cost": "42"},
	}
	applies := 0
	f.interceptor = &interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		applies++
		return c.Apply(ctx, obj, opts...)
	}}
	e := f.build()
	if err := e.r.createMachine(ctx, e.scope(ctx), "", nil); err != nil {
		t.Fatal(err)
	}
	name := e.newMachines()[0].Name
	// Someone else labels the Machine.
	m := e.getMachine(name)
	m.Labels["example.com/team"] = "blue"
	if err := e.c.Update(ctx, m, client.FieldOwner("kubectl-label")); err != nil {
		t.Fatal(err)
	}

	f.kcp.Spec.MachineTemplate.ObjectMeta = clusterv1.ObjectMeta{
		Labels:      map[string]string{"tier": "cp"},
		Annotations: map[string]string{"example.com/owner": "team-b"},
	}
	applies = 0
	if _, err := e.r.syncMachines(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	m = e.getMachine(name)
	if _, ok := m.Labels["zone"]; ok || m.Labels["tier"] != "cp" || m.Labels["example.com/team"] != "blue" {
		t.Errorf("labels = %v, want zone removed, tier and example.com/team kept", m.Labels)
	}
	if _, ok := m.Annotations["example.com/cost"]; ok || m.Annotations["example.com/owner"] != "team-b" || !hasHook(m) {
		t.Errorf("annotations = %v, want example.com/cost removed, the owner and the hook kept", m.Annotations)
	}
	if applies != 1 {
		t.Errorf("%d applies, want 1", applies)
	}
	applies = 0
	if _, err := e.r.syncMachines(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if applies != 0 {
		t.Errorf("a sync with nothing to change applied %d times", applies)
	}
}

// The next reconciliation waits until the cache has seen a Machine created or deleted: without
// it a reconciliation right after a scale-up can miss the new Machine and create another.
func TestCacheWaitsAfterCreateAndDelete(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", 2*time.Hour)
	e := f.build()
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	created := e.newMachines()
	if len(created) != 1 || !slices.Equal(e.ctrl.waits, []string{"Machine@" + created[0].ResourceVersion}) {
		t.Fatalf("after a scale-up: %d Machines created, waits %v, want a wait for the new Machine", len(created), e.ctrl.waits)
	}

	f = newFixture(t).replicas(1)
	f.machine("m1", 2*time.Hour)
	f.machine("m2", time.Hour)
	f.machine("m3", time.Hour)
	e = f.build()
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	// The fake delete client returns no object, so the wait is asked only by the real client;
	// what is checked here is that the delete went through the client that can ask for it.
	if got := e.deletedMachines(); len(got) != 1 {
		t.Fatalf("deleted %v, want one Machine", got)
	}
}

// A Machine the cache still lists after it is gone is not applied back into existence: the
// apply carries its uid, which the API server holds against a missing object.
func TestSyncMachineNeverRecreatesAGoneMachine(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).replicas(1)
	// The fake client creates whatever is applied; a kube-apiserver (v1.36, checked with envtest)
	// answers an apply whose metadata.uid names no existing object with 409 "uid mismatch".
	f.interceptor = &interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		// The control plane applies unstructured objects, which carry their metadata getters.
		meta, ok := obj.(metav1.Object)
		if !ok {
			return fmt.Errorf("applied a %T, not an object with metadata", obj)
		}
		if uid := meta.GetUID(); uid != "" {
			live := &clusterv1.Machine{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: meta.GetNamespace(), Name: meta.GetName()}, live); apierrors.IsNotFound(err) || live.UID != uid {
				return apierrors.NewConflict(clusterv1.GroupVersion.WithResource("machines").GroupResource(), meta.GetName(),
					fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", uid))
			}
		}
		return c.Apply(ctx, obj, opts...)
	}}
	e := f.build()
	if err := e.r.createMachine(ctx, e.scope(ctx), "", nil); err != nil {
		t.Fatal(err)
	}
	s := e.scope(ctx)
	stale := e.getMachine(e.newMachines()[0].Name)
	if err := e.c.Delete(ctx, stale); err != nil {
		t.Fatal(err)
	}
	// The fake client assigns no uids; an API server gave the Machine one.
	stale.UID = "0a6f1c3e-gone"
	// A label added to the template makes the stale Machine look outdated in its metadata.
	s.kcp.Spec.MachineTemplate.ObjectMeta.Labels = map[string]string{"tier": "cp"}
	if err := e.r.syncMachine(ctx, s, stale); err != nil {
		t.Fatalf("syncing a gone Machine: %v", err)
	}
	list := &clusterv1.MachineList{}
	if err := e.c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("the gone Machine %s was created again", list.Items[0].Name)
	}
}

// TestLongControlPlaneName: a KairosControlPlane name longer than a label value (63 characters)
// still creates Machines: the control-plane-name label carries the name's hash, as Cluster API's
// kubeadm control plane writes it, and the scale selector and the orphan search select by it.
func TestLongControlPlaneName(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).replicas(1)
	f.kcp.Name = strings.Repeat("very-long-control-plane-name-", 3)
	e := f.build()
	s := e.scope(ctx)
	if err := e.r.createMachine(ctx, s, "", nil); err != nil {
		t.Fatal(err)
	}
	created := e.newMachines()
	if len(created) != 1 {
		t.Fatalf("created %d Machines", len(created))
	}
	value := created[0].Labels[controlplanev1.ControlPlaneNameLabel]
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		t.Fatalf("control-plane-name label %q: %v", value, errs)
	}
	if value != format.MustFormatValue(f.kcp.Name) {
		t.Errorf("control-plane-name label %q, want Cluster API's formatting of the name %q", value, format.MustFormatValue(f.kcp.Name))
	}
	sel, err := labels.Parse(selector(s).String())
	if err != nil {
		t.Fatalf("the scale selector %q does not parse: %v", selector(s).String(), err)
	}
	if !sel.Matches(labels.Set(created[0].Labels)) {
		t.Errorf("the scale selector %q does not select the Machine (labels %v)", sel, created[0].Labels)
	}
	for _, c := range e.listConfigs() {
		if c.Name == created[0].Name && c.Labels[controlplanev1.ControlPlaneNameLabel] != value {
			t.Errorf("KairosConfig label %q, want %q", c.Labels[controlplanev1.ControlPlaneNameLabel], value)
		}
	}
	// A KairosConfig left without its Machine is found by the same label, and goes.
	if err := e.c.Delete(ctx, &created[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.reconcileOrphans(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if n := len(e.listConfigs()); n != 0 {
		t.Errorf("%d KairosConfigs left without their Machine, want them deleted", n)
	}
}

// TestDottedControlPlaneName: a KairosControlPlane name is a DNS subdomain and may have dots,
// which a Machine name may not have (it is the node's hostname, a DNS label): its Machines are
// named with hyphens instead, and the control-plane-name label keeps the name.
func TestDottedControlPlaneName(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).replicas(1)
	f.kcp.Name = "prod.cp"
	e := f.build()
	s := e.scope(ctx)
	if err := e.r.createMachine(ctx, s, "", nil); err != nil {
		t.Fatal(err)
	}
	created := e.newMachines()
	if len(created) != 1 {
		t.Fatalf("created %d Machines", len(created))
	}
	name := created[0].Name
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 || !strings.HasPrefix(name, "prod-cp-") {
		t.Errorf("Machine name %q: want prod-cp-<random>, a DNS label (%v)", name, errs)
	}
	if value := created[0].Labels[controlplanev1.ControlPlaneNameLabel]; value != "prod.cp" {
		t.Errorf("control-plane-name label %q, want prod.cp", value)
	}
	if !selector(s).Matches(labels.Set(created[0].Labels)) {
		t.Errorf("the scale selector %q does not select the Machine (labels %v)", selector(s), created[0].Labels)
	}
}
