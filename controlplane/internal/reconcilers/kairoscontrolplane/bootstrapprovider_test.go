package kairoscontrolplane

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func TestReleaseSkewProblem(t *testing.T) {
	for _, tc := range []struct {
		controlPlane, bootstrap string
		// want is a substring of the problem; "" means within the policy.
		want string
	}{
		{"v0.2.0", "v0.2.0", ""},
		{"v0.2.0", "v0.1.0", ""},
		{"v0.2.0", "v0.3.5", ""},
		{"v0.2.3", "v0.2.0-rc.1", ""},
		// Pre-release and snapshot bootstrap providers are exempt, even where their version alone
		// would be outside the policy (v0.4.x against v0.2.x).
		{"v0.2.0", "v0.4.0-rc.1", ""},
		{"v0.2.0", "v0.4.1-dev+3f3b205", ""},
		{"v0.2.0", "v0.4.0", "works with bootstrap v0.1.x to v0.3.x: upgrade the control-plane provider"},
		{"v0.3.0", "v0.1.2", "works with bootstrap v0.2.x to v0.4.x: upgrade the bootstrap provider"},
		{"v0.0.9", "v0.2.0", "works with bootstrap v0.0.x to v0.1.x"},
		{"v1.0.0", "v0.9.0", "upgrade the bootstrap provider"},
		{"v1.0.0", "v2.0.0", "upgrade the control-plane provider"},
		// A control plane built from a source tree, a goreleaser snapshot (.goreleaser.yaml
		// snapshot.version_template: {{ incpatch .Version }}-dev+{{ .ShortCommit }}) or a release
		// candidate is no release: only the contract is checked, against released bootstrap
		// providers too.
		{"dev", "v0.9.0", ""},
		{"", "v0.9.0", ""},
		{"v0.2.1-dev+3f3b205", "v0.9.0", ""},
		{"v0.3.0-rc.1", "v0.1.0", ""},
		// A bootstrap CRD without the release annotation is the release before it, v0.1.0, and is
		// held to the policy like any other.
		{"v0.2.0", "", ""},
		{"v0.1.4", "", ""},
		{"v0.3.0", "", "bootstrap provider v0.1.0 (its KairosConfig CRD names no release: a release before bootstrap.cluster.x-k8s.io/kairos-release) is outside the version-skew policy of control-plane provider v0.3.0"},
		{"v1.0.0", "", "upgrade the bootstrap provider"},
		{"v0.2.0", "latest", `names the release "latest", which is not a version`},
	} {
		got := releaseSkewProblem(tc.controlPlane, tc.bootstrap)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("releaseSkewProblem(%q, %q) = %q, want %q", tc.controlPlane, tc.bootstrap, got, tc.want)
		}
	}
}

func TestEvaluateBootstrapProvider(t *testing.T) {
	v := func(name string, served, storage bool) crdVersion {
		return crdVersion{name: name, served: served, storage: storage}
	}
	contract := func(versions string) map[string]string {
		return map[string]string{"cluster.x-k8s.io/v1beta2": versions}
	}
	for _, tc := range []struct {
		name           string
		crd            kairosConfigCRD
		controlPlane   string
		wantAPIVersion string
		wantProblem    string
	}{
		{name: "released CRD within the policy",
			crd:            kairosConfigCRD{labels: contract("v1beta2"), annotations: map[string]string{bootstrapv1.ReleaseAnnotation: "v0.1.0"}, versions: []crdVersion{v("v1beta2", true, true)}},
			controlPlane:   "v0.2.0",
			wantAPIVersion: "bootstrap.cluster.x-k8s.io/v1beta2"},
		{name: "a newer bootstrap API served next to the one this control plane writes",
			crd:            kairosConfigCRD{labels: contract("v1beta2_v1beta3"), versions: []crdVersion{v("v1beta2", true, false), v("v1beta3", true, true)}},
			wantAPIVersion: "bootstrap.cluster.x-k8s.io/v1beta2"},
		{name: "no contract label",
			crd:         kairosConfigCRD{labels: map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1"}, versions: []crdVersion{v("v1beta2", true, true)}},
			wantProblem: "has no cluster.x-k8s.io/v1beta2 label"},
		{name: "only a version this control plane cannot write",
			crd:         kairosConfigCRD{labels: contract("v1beta3"), versions: []crdVersion{v("v1beta2", false, false), v("v1beta3", true, true)}},
			wantProblem: "serves v1beta3 for contract v1beta2 (v1beta3), and this control plane writes only v1beta2: upgrade the control-plane provider"},
		{name: "the contract lists a version that is not served",
			crd:         kairosConfigCRD{labels: contract("v1beta2"), versions: []crdVersion{v("v1beta2", false, true)}},
			wantProblem: "writes only v1beta2"},
		{name: "release outside the policy",
			crd:          kairosConfigCRD{labels: contract("v1beta2"), annotations: map[string]string{bootstrapv1.ReleaseAnnotation: "v0.5.0"}, versions: []crdVersion{v("v1beta2", true, true)}},
			controlPlane: "v0.2.0",
			// The API version is known; the release is what is wrong.
			wantAPIVersion: "bootstrap.cluster.x-k8s.io/v1beta2",
			wantProblem:    "bootstrap provider v0.5.0 is outside the version-skew policy of control-plane provider v0.2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := evaluateBootstrapProvider(&tc.crd, tc.controlPlane)
			if b.apiVersion != tc.wantAPIVersion {
				t.Errorf("apiVersion = %q, want %q", b.apiVersion, tc.wantAPIVersion)
			}
			if tc.wantProblem == "" && b.problem != "" || tc.wantProblem != "" && !strings.Contains(b.problem, tc.wantProblem) {
				t.Errorf("problem = %q, want %q", b.problem, tc.wantProblem)
			}
			if b.compatible() != (tc.wantProblem == "") {
				t.Errorf("compatible() = %v", b.compatible())
			}
		})
	}
}

// TestLoadBootstrapProviderReadsTheCRDOncePerChange: the CRD's spec is read from the API server
// only when the cached metadata says the CRD changed.
func TestLoadBootstrapProviderReadsTheCRDOncePerChange(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.bootstrapCRD = bootstrapCRDObject("v0.1.0")
	e := f.build()
	e.r.Version = "v0.2.0"
	reads := 0
	e.r.APIReader = countingReader{Reader: e.c, n: &reads}
	for range 3 {
		b, err := e.r.loadBootstrapProvider(ctx)
		if err != nil || !b.compatible() || b.release != "v0.1.0" || b.storage != "v1beta2" {
			t.Fatalf("loadBootstrapProvider = %+v, %v", b, err)
		}
	}
	if reads != 1 {
		t.Errorf("read the CRD %d times, want once", reads)
	}
	// The bootstrap provider is upgraded outside the policy: the next look sees it.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := e.c.Get(ctx, client.ObjectKey{Name: kairosConfigCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	crd.SetAnnotations(map[string]string{bootstrapv1.ReleaseAnnotation: "v0.4.0"})
	if err := e.c.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	b, err := e.r.loadBootstrapProvider(ctx)
	if err != nil || b.compatible() || reads != 2 {
		t.Errorf("after the upgrade: %+v, %v, %d reads; want a problem after a second read", b, err, reads)
	}

	f = newFixture(t)
	f.noBootstrapCRD = true
	b, err = f.build().r.loadBootstrapProvider(ctx)
	if err != nil || !strings.Contains(b.problem, "clusterctl init --bootstrap kairos") {
		t.Errorf("without the CRD: %+v, %v", b, err)
	}
}

type countingReader struct {
	client.Reader
	n *int
}

func (c countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "CustomResourceDefinition" {
		*c.n++
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestNoMachineWithAnIncompatibleBootstrapProvider: outside the policy, the control plane creates
// no Machine (first or later), rolls out nothing and remediates nothing, and says why.
func TestNoMachineWithAnIncompatibleBootstrapProvider(t *testing.T) {
	incompatible := func(f *fixture) { f.bootstrapCRD = bootstrapCRDObject("v0.9.0") }
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
	}{
		{name: "first Machine", setup: func(f *fixture) {}},
		{name: "scale up", setup: func(f *fixture) {
			f.replicas(3)
			f.machine("m1", time.Hour)
		}},
		{name: "rollout without surge", setup: func(f *fixture) {
			f.maxSurge(0)
			f.replicas(3)
			f.machine("m1", 3*time.Hour)
			f.machine("m2", 2*time.Hour)
			f.machine("m3", time.Hour)
			f.kcp.Spec.Version = "v1.32.0"
		}},
		{name: "remediation", setup: func(f *fixture) {
			f.replicas(3)
			f.machine("m1", 3*time.Hour)
			f.machine("m2", 2*time.Hour)
			f.machine("m3", time.Hour, unhealthy())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			incompatible(f)
			tc.setup(f)
			e := f.build()
			e.r.Version = "v0.2.0"
			before := len(e.listMachines())
			res, err := e.r.reconcileNormal(ctx, e.scope(ctx))
			if err != nil {
				t.Fatal(err)
			}
			machines := e.listMachines()
			if len(machines) != before {
				t.Errorf("%d Machines, want %d", len(machines), before)
			}
			for _, m := range machines {
				if !m.DeletionTimestamp.IsZero() {
					t.Errorf("Machine %s deleted", m.Name)
				}
			}
			if res.RequeueAfter <= 0 || res.RequeueAfter > bootstrapRecheck {
				t.Errorf("RequeueAfter = %s, want at most %s (no watch sees the bootstrap provider's upgrade)", res.RequeueAfter, bootstrapRecheck)
			}
			s := e.scope(ctx)
			setBootstrapProviderCompatibleCondition(s)
			assertCondition(t, f.kcp, controlplanev1.BootstrapProviderCompatibleCondition, metav1.ConditionFalse,
				controlplanev1.BootstrapProviderNotCompatibleReason, "bootstrap provider v0.9.0 is outside the version-skew policy of control-plane provider v0.2.0")
		})
	}
}

// refuseKairosConfigs makes the API server refuse KairosConfig creates (dry runs included), as
// strict field validation does for a field the installed CRD does not know.
func refuseKairosConfigs(f *fixture, creates *[]string) {
	f.interceptor = &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if obj.GetObjectKind().GroupVersionKind().Kind == "KairosConfig" {
			o := &client.CreateOptions{}
			o.ApplyOptions(opts)
			*creates = append(*creates, strings.Join(o.DryRun, ","))
			return apierrors.NewBadRequest(`KairosConfig in version "v1beta2" cannot be handled as a KairosConfig: strict decoding error: unknown field "spec.virtualIP"`)
		}
		return c.Create(ctx, obj, opts...)
	}}
}

// TestRefusedKairosConfig: a KairosConfig the API server refuses stops the Machine before anything
// else is created, and the condition says what was refused and what to do.
func TestRefusedKairosConfig(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	var creates []string
	refuseKairosConfigs(f, &creates)
	e := f.build()
	s := e.scope(ctx)
	res, err := e.r.reconcileReplicas(ctx, s)
	if err != nil || res.RequeueAfter != bootstrapRecheck {
		t.Fatalf("reconcileReplicas = %+v, %v; want a recheck in %s", res, err, bootstrapRecheck)
	}
	if len(creates) != 1 || len(e.listMachines()) != 0 || len(e.listInfras()) != 0 {
		t.Errorf("KairosConfig creates %q, %d Machines, %d infrastructure machines; want one refused create and nothing else", creates, len(e.listMachines()), len(e.listInfras()))
	}
	if !strings.Contains(s.waitMessage, `unknown field "spec.virtualIP"`) {
		t.Errorf("wait message %q does not say what was refused", s.waitMessage)
	}
	setBootstrapProviderCompatibleCondition(s)
	assertCondition(t, f.kcp, controlplanev1.BootstrapProviderCompatibleCondition, metav1.ConditionFalse, controlplanev1.KairosConfigRefusedReason,
		`refused the KairosConfig of a new Machine: KairosConfig in version "v1beta2" cannot be handled as a KairosConfig: strict decoding error: unknown field "spec.virtualIP"; remove what it does not accept from spec.kairosConfigSpec (or the KairosConfigTemplate), or upgrade the bootstrap provider`)
}

// TestRolloutWithoutSurgeChecksTheReplacement: a rollout with maxSurge 0 removes a Machine only
// when a dry run shows its replacement's KairosConfig would be accepted.
func TestRolloutWithoutSurgeChecksTheReplacement(t *testing.T) {
	for _, refused := range []bool{true, false} {
		t.Run(map[bool]string{true: "refused", false: "accepted"}[refused], func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t).maxSurge(0)
			f.replicas(3)
			f.machine("m1", 3*time.Hour)
			f.machine("m2", 2*time.Hour)
			f.machine("m3", time.Hour)
			f.kcp.Spec.Version = "v1.32.0"
			var creates []string
			if refused {
				refuseKairosConfigs(f, &creates)
			}
			e := f.build()
			configs := len(e.listConfigs())
			s := e.scope(ctx)
			if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
				t.Fatal(err)
			}
			deleted := 0
			for _, m := range e.listMachines() {
				if !m.DeletionTimestamp.IsZero() {
					deleted++
				}
			}
			if n := len(e.listConfigs()); n != configs {
				t.Errorf("%d KairosConfigs after the dry run, want %d", n, configs)
			}
			if refused {
				if deleted != 0 || len(creates) != 1 || creates[0] != metav1.DryRunAll {
					t.Errorf("deleted %d Machines after KairosConfig creates %q; want none after one dry run", deleted, creates)
				}
				if !strings.Contains(s.waitMessage, "not removing Machine m1 for a rollout, its replacement could not be created") {
					t.Errorf("wait message = %q", s.waitMessage)
				}
				return
			}
			if deleted != 1 {
				t.Errorf("deleted %d Machines, want 1 (%s)", deleted, s.waitMessage)
			}
		})
	}
}

// TestKairosConfigCreateOptions: KairosConfigs are created under the control plane's field
// manager, with strict field validation.
func TestKairosConfigCreateOptions(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	var got *client.CreateOptions
	f.interceptor = &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if obj.GetObjectKind().GroupVersionKind().Kind == "KairosConfig" {
			got = &client.CreateOptions{}
			got.ApplyOptions(opts)
			if gv := obj.GetObjectKind().GroupVersionKind().GroupVersion(); gv != bootstrapv1.GroupVersion {
				t.Errorf("KairosConfig created as %s", gv)
			}
		}
		return c.Create(ctx, obj, opts...)
	}}
	e := f.build()
	if err := e.r.createMachine(ctx, e.scope(ctx), "", nil); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.FieldManager != fieldManager || got.FieldValidation != metav1.FieldValidationStrict || len(got.DryRun) != 0 {
		t.Errorf("KairosConfig create options = %+v, want field manager %s and strict field validation", got, fieldManager)
	}
}

// TestUpToDateComparesOwnedFields: what the installed bootstrap provider added to a KairosConfig
// (defaults this control plane does not apply, or applies differently) is no reason to roll out;
// a field the control plane set and no longer wants is.
func TestUpToDateComparesOwnedFields(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	e := f.build()
	if err := e.r.createMachine(ctx, e.scope(ctx), "", nil); err != nil {
		t.Fatal(err)
	}
	m := e.newMachines()[0]
	e.joinNode(ctx, &m)

	// A bootstrap provider's webhook (another field manager) sets fields on the KairosConfig,
	// one of them to a default this control plane's release does not know.
	config := e.getConfig(m.Name)
	config.Spec.UserName = "core"
	config.Spec.UserGroups = []string{"wheel"}
	config.Spec.ProviderID.Source = bootstrapv1.ProviderIDFromMachine
	if err := e.c.Update(ctx, config, client.FieldOwner("kairos-bootstrap-webhook")); err != nil {
		t.Fatal(err)
	}
	s := e.scope(ctx)
	if ok, why := s.upToDate(s.machines[m.Name]); !ok {
		t.Errorf("Machine outdated by fields the control plane did not set: %q", why)
	}

	// The user drops a field the control plane had set.
	f.kcp.Spec.KairosConfigSpec.PreCommands = nil
	s = e.scope(ctx)
	if ok, why := s.upToDate(s.machines[m.Name]); ok || !strings.Contains(strings.Join(why, ","), "KairosConfig spec changed") {
		t.Errorf("Machine up to date (%v, %q) after a field the control plane set was removed from the spec", ok, why)
	}
}

// TestUpToDateWithoutOwnedFields: a KairosConfig whose managedFields name no field of the control
// plane (created before it named its field manager) is compared whole, defaulted.
func TestUpToDateWithoutOwnedFields(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour) // the fixture's KairosConfig has no managedFields
	e := f.build()
	s := e.scope(ctx)
	if _, ok := s.ownedConfigs["m1"]; ok {
		t.Fatal("owned fields found on a KairosConfig without managedFields")
	}
	if ok, why := s.upToDate(s.machines["m1"]); !ok {
		t.Errorf("Machine outdated: %q", why)
	}
	config := e.getConfig("m1")
	config.Spec.UserName = "core"
	if err := e.c.Update(ctx, config); err != nil {
		t.Fatal(err)
	}
	s = e.scope(ctx)
	if ok, _ := s.upToDate(s.machines["m1"]); ok {
		t.Error("a changed KairosConfig without managedFields compares equal")
	}
}

// TestRecordBootstrapProblem: a Warning event when BootstrapProviderCompatible turns False or
// says something new while False; none while it stays the same or is True.
func TestRecordBootstrapProblem(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: controlplanev1.BootstrapProviderCompatibleCondition, Status: status, Reason: reason, Message: msg}
	}
	refused := cond(metav1.ConditionFalse, controlplanev1.KairosConfigRefusedReason, "refused")
	for _, tc := range []struct {
		name          string
		before, after *metav1.Condition
		want          int
	}{
		{"turns false", cond(metav1.ConditionTrue, controlplanev1.BootstrapProviderCompatibleReason, ""), refused, 1},
		{"first reconcile, false", nil, refused, 1},
		{"stays the same", refused, refused, 0},
		{"new message", refused, cond(metav1.ConditionFalse, controlplanev1.BootstrapProviderNotCompatibleReason, "outside"), 1},
		{"true", nil, cond(metav1.ConditionTrue, controlplanev1.BootstrapProviderCompatibleReason, ""), 0},
	} {
		recorder := record.NewFakeRecorder(5)
		r := &Reconciler{Recorder: recorder}
		kcp := &controlplanev1.KairosControlPlane{}
		kcp.Status.Conditions = []metav1.Condition{*tc.after}
		r.recordBootstrapProblem(tc.before, kcp)
		if got := len(recorder.Events); got != tc.want {
			t.Errorf("%s: %d events, want %d", tc.name, got, tc.want)
		}
	}
}
