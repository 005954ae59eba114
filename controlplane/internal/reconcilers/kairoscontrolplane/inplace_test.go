package kairoscontrolplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/extension"
)

// fakeRuntimeClient is Cluster API's runtime client as the control plane uses it: the
// registered CanUpdateMachine handlers and their answers. Requests and responses go through
// JSON, as they do over HTTP; by default the answer is the Kairos update extension's own.
// Cluster API's fake (internal/runtime/client/fake) is internal.
type fakeRuntimeClient struct {
	runtimeclient.Client // not implemented: calls outside the control plane's use panic

	handlers []string
	// answer answers a CanUpdateMachine call; nil: the Kairos extension.
	answer func(*runtimehooksv1.CanUpdateMachineRequest, *runtimehooksv1.CanUpdateMachineResponse)
	// err fails every call.
	err error
	// calls are the CanUpdateMachine requests received.
	calls []*runtimehooksv1.CanUpdateMachineRequest
}

func newFakeRuntimeClient() *fakeRuntimeClient {
	return &fakeRuntimeClient{handlers: []string{extension.CanUpdateMachineHandler}}
}

func (c *fakeRuntimeClient) GetAllExtensions(_ context.Context, hook runtimecatalog.Hook, _ client.Object) ([]string, error) {
	if runtimecatalog.HookName(hook) != runtimecatalog.HookName(runtimehooksv1.CanUpdateMachine) {
		return nil, fmt.Errorf("unexpected hook %s", runtimecatalog.HookName(hook))
	}
	return c.handlers, nil
}

func (c *fakeRuntimeClient) CallExtension(ctx context.Context, hook runtimecatalog.Hook, _ client.Object, name string, request runtimehooksv1.RequestObject, response runtimehooksv1.ResponseObject, _ ...runtimeclient.CallExtensionOption) error {
	if c.err != nil {
		return c.err
	}
	if runtimecatalog.HookName(hook) != runtimecatalog.HookName(runtimehooksv1.CanUpdateMachine) || !slices.Contains(c.handlers, name) {
		return fmt.Errorf("unexpected call of %s on %s", runtimecatalog.HookName(hook), name)
	}
	raw, err := json.Marshal(request)
	if err != nil {
		return err
	}
	req := &runtimehooksv1.CanUpdateMachineRequest{}
	if err := json.Unmarshal(raw, req); err != nil {
		return err
	}
	c.calls = append(c.calls, req)
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	if c.answer != nil {
		c.answer(req, resp)
	} else {
		(&extension.Handlers{}).CanUpdateMachine(ctx, req, resp)
	}
	// Cluster API's client turns a Failure response into an error.
	if resp.GetStatus() == runtimehooksv1.ResponseStatusFailure {
		return fmt.Errorf("extension %s failed: %s", name, resp.GetMessage())
	}
	raw, err = json.Marshal(resp)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, response)
}

// Kairos images carrying the fixture's version and the upgrade's.
const (
	oldImage   = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.31.2-k0s.0"
	newImage   = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.32.0-k0s.0"
	newVersion = "v1.32.0"
)

// inPlaceFixture is a Kairos control plane whose Machines run oldImage, with the InPlaceUpdates
// gate on and the Kairos extension registered; upgrade asks for newImage and newVersion.
func inPlaceFixture(t *testing.T) *fixture {
	t.Helper()
	featuregatetesting.SetFeatureGateDuringTest(t, feature.Gates, feature.InPlaceUpdates, true)
	f := newFixture(t)
	f.kcp.Spec.KairosConfigSpec.Image = oldImage
	f.runtime = newFakeRuntimeClient()
	return f
}

func (f *fixture) upgrade() *fixture {
	f.kcp.Spec.Version = newVersion
	f.kcp.Spec.KairosConfigSpec.Image = newImage
	return f
}

// threeMachines adds m1 (oldest) to m3, up to date with the spec so far.
func (f *fixture) threeMachines(opts ...func(*clusterv1.Machine)) *fixture {
	f.machine("m1", 3*time.Hour, opts...)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	return f
}

func updatingAnnotations(m *clusterv1.Machine) {
	m.Annotations[clusterv1.UpdateInProgressAnnotation] = ""
	m.Annotations[runtimev1.PendingHooksAnnotation] = "UpdateMachine"
}

// inPlaceStarted tells whether the control plane handed Machine name to Cluster API for an
// in-place update, and checks what it wrote then.
func (e *env) inPlaceStarted(name string) bool {
	e.t.Helper()
	m := e.getMachine(name)
	if m == nil || !m.DeletionTimestamp.IsZero() || !hookPending(m, "UpdateMachine") {
		return false
	}
	if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok {
		e.t.Errorf("Machine %s: UpdateMachine pending without %s", name, clusterv1.UpdateInProgressAnnotation)
	}
	if m.Spec.Version != e.kcp.Spec.Version {
		e.t.Errorf("Machine %s version = %s, want %s", name, m.Spec.Version, e.kcp.Spec.Version)
	}
	config := e.getConfig(name)
	if _, ok := config.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok || config.Spec.Image != e.kcp.Spec.KairosConfigSpec.Image {
		e.t.Errorf("KairosConfig %s: image %s, annotations %v; want image %s and %s", name, config.Spec.Image, config.Annotations, e.kcp.Spec.KairosConfigSpec.Image, clusterv1.UpdateInProgressAnnotation)
	}
	if _, ok := e.getInfra(name).GetAnnotations()[clusterv1.UpdateInProgressAnnotation]; !ok {
		e.t.Errorf("infrastructure machine %s has no %s", name, clusterv1.UpdateInProgressAnnotation)
	}
	return true
}

// finishInPlaceUpdate plays Cluster API's Machine controller once UpdateMachine reported done:
// it removes the annotations from the Machine, its KairosConfig and its infrastructure machine.
func (e *env) finishInPlaceUpdate(ctx context.Context, name string) {
	e.t.Helper()
	m := e.getMachine(name)
	before := m.DeepCopy()
	delete(m.Annotations, clusterv1.UpdateInProgressAnnotation)
	delete(m.Annotations, runtimev1.PendingHooksAnnotation)
	if err := e.c.Patch(ctx, m, client.MergeFrom(before)); err != nil {
		e.t.Fatal(err)
	}
	config := e.getConfig(name)
	cb := config.DeepCopy()
	delete(config.Annotations, clusterv1.UpdateInProgressAnnotation)
	if err := e.c.Patch(ctx, config, client.MergeFrom(cb)); err != nil {
		e.t.Fatal(err)
	}
	infra := e.getInfra(name)
	ib := infra.DeepCopy()
	a := infra.GetAnnotations()
	delete(a, clusterv1.UpdateInProgressAnnotation)
	infra.SetAnnotations(a)
	if err := e.c.Patch(ctx, infra, client.MergeFrom(ib)); err != nil {
		e.t.Fatal(err)
	}
}

// writes records the write calls of the management client, as "verb kind/name".
func (f *fixture) recordWrites() *[]string {
	var writes []string
	f.interceptor = &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes = append(writes, "patch "+kindOf(c, obj)+"/"+obj.GetName())
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			u := &unstructured.Unstructured{}
			if raw, err := json.Marshal(obj); err == nil {
				_ = u.UnmarshalJSON(raw)
			}
			writes = append(writes, "apply "+u.GetKind()+"/"+u.GetName())
			return c.Apply(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes = append(writes, "create "+kindOf(c, obj)+"/"+obj.GetName())
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes = append(writes, "delete "+kindOf(c, obj)+"/"+obj.GetName())
			return c.Delete(ctx, obj, opts...)
		},
	}
	return &writes
}

func kindOf(c client.Client, obj client.Object) string {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return gvk.Kind
}

// TestInPlaceDecision is the decision table: three outdated Machines and their up-to-date surge
// Machine m4 (three replicas, maxSurge 1): the rollout picks the oldest outdated Machine, m1, and
// either updates it in place or deletes it as it would without in-place updates.
func TestInPlaceDecision(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		// wantInPlace: m1 was handed to Cluster API; wantDeleted: the Machines deleted.
		wantInPlace bool
		wantDeleted []string
		// wantCalls is the number of CanUpdateMachine calls.
		wantCalls int
		wantWait  string
		// wantDecision is a substring of the path message for the RollingOut condition ("" for
		// none: in-place updates were not considered).
		wantDecision  string
		wantPreflight []string
		wantErr       string
	}{
		{name: "the extension can do it: m1 is updated in place",
			setup:       func(t *testing.T, f *fixture) {},
			wantInPlace: true, wantCalls: 1, wantWait: "updating Machine m1 in place", wantDecision: "updating Machine m1 in place"},
		{name: "gate off: m1 is deleted, the extension is not asked",
			setup: func(t *testing.T, f *fixture) {
				featuregatetesting.SetFeatureGateDuringTest(t, feature.Gates, feature.InPlaceUpdates, false)
			},
			wantDeleted: []string{"m1"}, wantWait: "deleting Machine m1"},
		{name: "no runtime client: m1 is deleted",
			setup:       func(t *testing.T, f *fixture) { f.runtime = nil },
			wantDeleted: []string{"m1"}, wantWait: "deleting Machine m1"},
		{name: "no extension registered: m1 is deleted, nothing reported",
			setup:       func(t *testing.T, f *fixture) { f.runtime.handlers = nil },
			wantDeleted: []string{"m1"}, wantWait: "deleting Machine m1"},
		{name: "no extension registered and a delete-machine annotation: nothing reported either",
			setup: func(t *testing.T, f *fixture) {
				f.runtime.handlers = nil
				f.machines[0].Annotations[clusterv1.DeleteMachineAnnotation] = ""
			},
			wantDeleted: []string{"m1"}, wantWait: "deleting Machine m1"},
		{name: "the extension cannot do every change: m1 is deleted, the field is named",
			setup: func(t *testing.T, f *fixture) {
				f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo changed"}
			},
			wantDeleted: []string{"m1"}, wantCalls: 1, wantWait: "deleting Machine m1",
			wantDecision: "replacing Machine m1, not updating it in place: extension kairos-can-update-machine cannot update KairosConfig spec.preCommands"},
		{name: "the extension says nothing can change: m1 is deleted",
			setup: func(t *testing.T, f *fixture) {
				f.runtime.answer = func(_ *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) {
					resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
				}
			},
			wantDeleted: []string{"m1"}, wantCalls: 1,
			wantDecision: "cannot update Machine spec.version, KairosConfig spec.image"},
		{name: "delete-machine annotation: m1 is deleted, the extension is not asked",
			setup: func(t *testing.T, f *fixture) {
				f.machines[0].Annotations[clusterv1.DeleteMachineAnnotation] = ""
			},
			wantDeleted: []string{"m1"}, wantDecision: "it has the cluster.x-k8s.io/delete-machine annotation"},
		{name: "remediate-machine annotation: m1 is deleted, the extension is not asked",
			setup: func(t *testing.T, f *fixture) {
				f.machines[0].Annotations[clusterv1.RemediateMachineAnnotation] = ""
			},
			wantDeleted: []string{"m1"}, wantDecision: "it has the cluster.x-k8s.io/remediate-machine annotation"},
		{name: "rollout.after expired: m1 is deleted, the extension is not asked",
			setup: func(t *testing.T, f *fixture) {
				f.kcp.Spec.Rollout.After = metav1.NewTime(f.now.Add(-time.Minute))
			},
			wantDeleted: []string{"m1"}, wantDecision: "spec.rollout.after"},
		{name: "another Machine fails preflight: nothing happens",
			setup: func(t *testing.T, f *fixture) {
				notReady()(f.machines[3])
			},
			wantWait: "preflight checks failed: Machine m4 is not ready", wantPreflight: []string{"Machine m4 is not ready"}},
		{name: "etcd member of another Machine down: nothing happens",
			setup: func(t *testing.T, f *fixture) {
				f.member("m4").state = memberDown
			},
			wantPreflight: []string{"Machine m4: etcd member m4 does not answer"}},
		{name: "an etcd learner: nothing happens",
			setup: func(t *testing.T, f *fixture) {
				f.member("m4").learner = true
			},
			wantPreflight: []string{"learner"}},
		{name: "only m1 fails preflight: it is replaced, not updated",
			setup: func(t *testing.T, f *fixture) {
				notReady()(f.machines[0])
			},
			wantDeleted: []string{"m1"}, wantDecision: "it fails the preflight checks itself: Machine m1 is not ready"},
		{name: "another Machine is updating in place: nothing happens",
			setup: func(t *testing.T, f *fixture) {
				updatingAnnotations(f.machines[1])
			},
			wantWait: "waiting for the in-place update of Machine(s) m2 to complete"},
		{name: "another Machine has UpdateMachine pending only: nothing happens",
			setup: func(t *testing.T, f *fixture) {
				f.machines[2].Annotations[runtimev1.PendingHooksAnnotation] = "UpdateMachine"
			},
			wantWait: "waiting for the in-place update of Machine(s) m3 to complete"},
		{name: "two extensions registered: error, nothing happens",
			setup: func(t *testing.T, f *fixture) {
				f.runtime.handlers = append(f.runtime.handlers, "other")
			},
			wantErr: "only one is supported"},
		{name: "the extension fails: error, nothing happens",
			setup: func(t *testing.T, f *fixture) {
				f.runtime.err = errors.New("connection refused")
			},
			wantErr: "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := inPlaceFixture(t).threeMachines()
			f.upgrade()
			f.machine("m4", time.Minute)
			tc.setup(t, f)
			e := f.build()
			s := e.scope(ctx)
			_, err := e.r.reconcileReplicas(ctx, s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("reconcileReplicas: %v", err)
			}
			if got := e.inPlaceStarted("m1"); got != tc.wantInPlace {
				t.Errorf("m1 updated in place = %v, want %v", got, tc.wantInPlace)
			}
			for _, m := range f.machines[1:] {
				if !updatingInPlace(m) && e.inPlaceStarted(m.Name) {
					t.Errorf("%s updated in place too", m.Name)
				}
			}
			if got := e.deletedMachines(); !slices.Equal(got, tc.wantDeleted) {
				t.Errorf("deleted %v, want %v", got, tc.wantDeleted)
			}
			if created := e.newMachines(); len(created) > 0 {
				t.Errorf("created %d Machines", len(created))
			}
			if f.runtime != nil && len(f.runtime.calls) != tc.wantCalls {
				t.Errorf("CanUpdateMachine called %d times, want %d", len(f.runtime.calls), tc.wantCalls)
			}
			containsAll(t, "waitMessage", s.waitMessage, tc.wantWait)
			if tc.wantDecision == "" && s.inPlaceMessage != "" {
				t.Errorf("decision message = %q, want none", s.inPlaceMessage)
			}
			containsAll(t, "decision message", s.inPlaceMessage, tc.wantDecision)
			containsAll(t, "preflight messages", strings.Join(s.preflightMessages, "\n"), tc.wantPreflight...)
			if len(tc.wantPreflight) == 0 && len(s.preflightMessages) > 0 {
				t.Errorf("preflight messages = %q, want none", s.preflightMessages)
			}
			// The path taken is in the RollingOut condition.
			updateStatus(ctx, s)
			if c := conditions.Get(e.kcp, controlplanev1.RollingOutCondition); c == nil || !strings.Contains(c.Message, tc.wantDecision) {
				t.Errorf("RollingOut = %+v, want a message with %q", c, tc.wantDecision)
			}
		})
	}
}

// TestInPlaceRequest checks what the extension is asked: the current and desired Machine,
// KairosConfig and infrastructure machine, differing only in what the upgrade changes.
func TestInPlaceRequest(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).maxSurge(0).threeMachines()
	f.machines[0].Spec.ProviderID = "kairos://m1"
	f.machines[0].Spec.Bootstrap.DataSecretName = ptrTo("m1")
	_ = unstructured.SetNestedField(f.infras["m1"].Object, "kairos://m1", "spec", "providerID")
	f.upgrade()
	e := f.build()
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if len(f.runtime.calls) != 1 {
		t.Fatalf("CanUpdateMachine called %d times, want 1", len(f.runtime.calls))
	}
	req := f.runtime.calls[0]
	if req.Current.Machine.Spec.Version != testVersion || req.Desired.Machine.Spec.Version != newVersion {
		t.Errorf("Machine versions %s -> %s, want %s -> %s", req.Current.Machine.Spec.Version, req.Desired.Machine.Spec.Version, testVersion, newVersion)
	}
	// Fields set after creation are no difference.
	if req.Desired.Machine.Spec.ProviderID != "kairos://m1" || ptrDeref(req.Desired.Machine.Spec.Bootstrap.DataSecretName) != "m1" {
		t.Errorf("desired Machine spec %+v lost providerID or dataSecretName", req.Desired.Machine.Spec)
	}
	for _, tc := range []struct {
		what             string
		current, desired runtime.RawExtension
		wantKind         string
		wantDiff         []string
	}{
		{"KairosConfig", req.Current.BootstrapConfig, req.Desired.BootstrapConfig, "KairosConfig", []string{"image"}},
		{"infrastructure machine", req.Current.InfrastructureMachine, req.Desired.InfrastructureMachine, infraKind, nil},
	} {
		cur, des := map[string]any{}, map[string]any{}
		if err := json.Unmarshal(tc.current.Raw, &cur); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(tc.desired.Raw, &des); err != nil {
			t.Fatal(err)
		}
		if cur["kind"] != tc.wantKind || des["kind"] != tc.wantKind {
			t.Errorf("%s kinds %v, %v, want %s", tc.what, cur["kind"], des["kind"], tc.wantKind)
		}
		cs, _ := cur["spec"].(map[string]any)
		ds, _ := des["spec"].(map[string]any)
		if got := specDiff(cs, ds); !slices.Equal(got, tc.wantDiff) {
			t.Errorf("%s spec differs in %v, want %v (current %v, desired %v)", tc.what, got, tc.wantDiff, cs, ds)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func ptrDeref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestInPlaceTriggerWrites checks the order of the writes that start an in-place update: the
// annotation on the Machine first, then the desired infrastructure machine, KairosConfig and
// Machine, then the pending hook; the cache waits for both Machine writes.
func TestInPlaceTriggerWrites(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).maxSurge(0).threeMachines()
	f.upgrade()
	writes := f.recordWrites()
	e := f.build()
	recorder := record.NewFakeRecorder(10)
	e.r.Recorder = recorder
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch Machine/m1", "patch " + infraKind + "/m1", "patch KairosConfig/m1", "apply Machine/m1", "patch Machine/m1"}
	if !slices.Equal(*writes, want) {
		t.Errorf("writes = %q, want %q", *writes, want)
	}
	if !e.inPlaceStarted("m1") {
		t.Fatal("m1 was not handed to Cluster API")
	}
	// The decision is recorded before anything else is written.
	if len(e.ctrl.waits) != 2 {
		t.Errorf("cache waits = %v, want one after the annotation and one after the pending hook", e.ctrl.waits)
	}
	m := e.getMachine("m1")
	if got := m.Annotations[runtimev1.PendingHooksAnnotation]; got != "UpdateMachine" {
		t.Errorf("pending hooks = %q, want UpdateMachine", got)
	}
	// Everything else the Machine's objects had is kept.
	if _, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]; !ok {
		t.Error("the etcd pre-terminate hook annotation is gone")
	}
	config := e.getConfig("m1")
	if config.Spec.UserPassword != "s3cret" || !slices.Equal(config.Spec.PreCommands, []string{"echo hello"}) {
		t.Errorf("KairosConfig spec changed beyond the image: %+v", config.Spec)
	}
	if size, _, _ := unstructured.NestedString(e.getInfra("m1").Object, "spec", "size"); size != "small" {
		t.Errorf("infrastructure machine size = %q, want small", size)
	}
	select {
	case ev := <-recorder.Events:
		containsAll(t, "event", ev, "Normal SuccessfulStartInPlaceUpdate", newVersion)
	default:
		t.Error("no event on the Machine")
	}
}

// TestInPlaceTriggerResumes interrupts the start of an in-place update right after the decision
// was recorded on the Machine: the next reconciliation completes it without asking the extension
// again, and the one after that writes nothing.
func TestInPlaceTriggerResumes(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).maxSurge(0).threeMachines()
	f.upgrade()
	fail := true
	var writes []string
	f.interceptor = &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes = append(writes, kindOf(c, obj)+"/"+obj.GetName())
			if fail && kindOf(c, obj) == infraKind {
				return errors.New("the infrastructure provider's webhook is down")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			writes = append(writes, "apply")
			return c.Apply(ctx, obj, opts...)
		},
	}
	e := f.build()
	_, err := e.r.reconcileReplicas(ctx, e.scope(ctx))
	if err == nil || !strings.Contains(err.Error(), "webhook is down") {
		t.Fatalf("error = %v, want the infrastructure write's", err)
	}
	m := e.getMachine("m1")
	if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok || hookPending(m, "UpdateMachine") {
		t.Fatalf("after the interruption: annotations %v, want %s and no pending hook", m.Annotations, clusterv1.UpdateInProgressAnnotation)
	}

	// The next reconciliation completes the start; with the spec changed meanwhile in a way the
	// extension could not do, it still completes it: the decision was taken.
	fail = false
	s := e.scope(ctx)
	if _, err := e.r.completeInPlaceUpdateTriggers(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !s.halted || !strings.Contains(s.waitMessage, "updating Machine m1 in place") {
		t.Errorf("halted %v, wait %q; want it to stop after completing the start", s.halted, s.waitMessage)
	}
	if len(f.runtime.calls) != 1 {
		t.Errorf("CanUpdateMachine called %d times, want once (the decision is not taken again)", len(f.runtime.calls))
	}
	if !e.inPlaceStarted("m1") {
		t.Fatal("the second reconciliation did not complete the start")
	}

	// Then nothing is left to write, and the rollout waits for Cluster API.
	writes = nil
	s = e.scope(ctx)
	if _, err := e.r.completeInPlaceUpdateTriggers(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	if len(writes) != 0 {
		t.Errorf("writes while waiting: %q", writes)
	}
	containsAll(t, "waitMessage", s.waitMessage, "waiting for the in-place update of Machine(s) m1 to complete")
}

// TestInPlaceSingleReplicaWithoutSurge: one replica and maxSurge 0 upgrade in place. Without an
// extension that can do it, the control plane does what it did before.
func TestInPlaceSingleReplicaWithoutSurge(t *testing.T) {
	run := func(t *testing.T, setup func(*fixture)) (*env, *scope) {
		ctx := testContext(t)
		f := inPlaceFixture(t).replicas(1).maxSurge(0)
		f.machine("m1", time.Hour)
		f.upgrade()
		setup(f)
		e := f.build()
		s := e.scope(ctx)
		if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
			t.Fatal(err)
		}
		return e, s
	}
	t.Run("in place", func(t *testing.T) {
		e, s := run(t, func(*fixture) {})
		if !e.inPlaceStarted("m1") {
			t.Errorf("m1 not updated in place (wait %q, preflight %q)", s.waitMessage, s.preflightMessages)
		}
		if len(e.deletedMachines()) > 0 || len(e.newMachines()) > 0 {
			t.Errorf("deleted %v, created %d", e.deletedMachines(), len(e.newMachines()))
		}
	})
	without, sw := run(t, func(f *fixture) {
		featuregatetesting.SetFeatureGateDuringTest(t, feature.Gates, feature.InPlaceUpdates, false)
	})
	// What the control plane did before: it does not delete the only Machine, whose etcd member
	// is the whole of etcd; the rollout waits.
	containsAll(t, "preflight without the gate", strings.Join(sw.preflightMessages, "\n"), "removing Machine m1 would lose etcd quorum")
	for name, setup := range map[string]func(*fixture){
		"no extension":       func(f *fixture) { f.runtime.handlers = nil },
		"extension says no":  func(f *fixture) { f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo changed"} },
		"delete annotation":  func(f *fixture) { f.machines[0].Annotations[clusterv1.DeleteMachineAnnotation] = "" },
		"remediation marked": func(f *fixture) { f.machines[0].Annotations[clusterv1.RemediateMachineAnnotation] = "" },
	} {
		t.Run(name+": as without the gate", func(t *testing.T) {
			e, s := run(t, setup)
			if e.inPlaceStarted("m1") {
				t.Error("m1 updated in place")
			}
			if !slices.Equal(e.deletedMachines(), without.deletedMachines()) || s.waitMessage != sw.waitMessage ||
				!slices.Equal(s.preflightMessages, sw.preflightMessages) {
				t.Errorf("deleted %v, wait %q, preflight %q; without the gate: %v, %q, %q",
					e.deletedMachines(), s.waitMessage, s.preflightMessages, without.deletedMachines(), sw.waitMessage, sw.preflightMessages)
			}
		})
	}
}

// TestInPlaceRolloutSequence upgrades three Machines with maxSurge 0 in place, one after the
// other, each once Cluster API's Machine controller finished the previous one: no Machine is
// created or deleted.
func TestInPlaceRolloutSequence(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).maxSurge(0).threeMachines()
	f.upgrade()
	e := f.build()
	var order []string
	for range 10 {
		s := e.scope(ctx)
		res, err := e.r.reconcileNormal(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.preflightMessages) > 0 {
			t.Fatalf("preflight failed: %q", s.preflightMessages)
		}
		if !s.halted {
			if !res.IsZero() && res.RequeueAfter != e.r.HealthInterval {
				t.Errorf("idle result %+v", res)
			}
			break
		}
		updating := s.updatingMachines()
		if updating.Len() == 0 {
			// The phase that halted updated nothing: read back what it did.
			for _, m := range e.listMachines() {
				if updatingInPlace(&m) {
					updating.Insert(m.DeepCopy())
				}
			}
		}
		if updating.Len() != 1 {
			t.Fatalf("%d Machines updating at once (wait %q)", updating.Len(), s.waitMessage)
		}
		name := updating.UnsortedList()[0].Name
		order = append(order, name)
		e.finishInPlaceUpdate(ctx, name)
	}
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(order, want) {
		t.Errorf("updated %v, want %v", order, want)
	}
	if len(e.newMachines()) > 0 || len(e.deletedMachines()) > 0 {
		t.Errorf("created %d, deleted %v", len(e.newMachines()), e.deletedMachines())
	}
	s := e.scope(ctx)
	if outdated, reasons := s.outdatedMachines(); outdated.Len() > 0 {
		t.Errorf("still outdated after the rollout: %v", reasons)
	}
	if len(f.runtime.calls) != 3 {
		t.Errorf("CanUpdateMachine called %d times, want 3", len(f.runtime.calls))
	}
}

// TestInPlaceNoWritesWhenNothingChanged: an up-to-date control plane with in-place updates on
// asks no extension and writes nothing.
func TestInPlaceNoWritesWhenNothingChanged(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).maxSurge(0).threeMachines()
	writes := f.recordWrites()
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.completeInPlaceUpdateTriggers(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	if len(*writes) != 0 || len(f.runtime.calls) != 0 || s.halted {
		t.Errorf("writes %q, calls %d, halted %v (%q)", *writes, len(f.runtime.calls), s.halted, s.waitMessage)
	}
}

// TestInPlaceStatus: a Machine being updated in place is not up to date (reason Updating, with
// the Machine controller's progress), and the RollingOut condition says so.
func TestInPlaceStatus(t *testing.T) {
	ctx := testContext(t)
	// The spec was written already: only the node is not there yet.
	f := inPlaceFixture(t).upgrade().threeMachines()
	updatingAnnotations(f.machines[0])
	withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, "InPlaceUpdating")(f.machines[0])
	f.machines[0].Status.Conditions[len(f.machines[0].Status.Conditions)-1].Message = "Waiting for extension to complete the update"
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.syncMachines(ctx, s); err != nil {
		t.Fatal(err)
	}
	m := e.getMachine("m1")
	c := conditions.Get(m, clusterv1.MachineUpToDateCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != clusterv1.MachineUpToDateUpdatingReason || c.Message != "* Waiting for extension to complete the update" {
		t.Errorf("UpToDate of m1 = %+v, want False, %s, the Updating message", c, clusterv1.MachineUpToDateUpdatingReason)
	}
	updateStatus(ctx, s)
	rolling := conditions.Get(e.kcp, controlplanev1.RollingOutCondition)
	if rolling == nil || rolling.Status != metav1.ConditionTrue {
		t.Fatalf("RollingOut = %+v, want True", rolling)
	}
	containsAll(t, "RollingOut", rolling.Message, "Machine m1: updating in place: Waiting for extension to complete the update")
	if got := *e.kcp.Status.UpToDateReplicas; got != 2 {
		t.Errorf("upToDateReplicas = %d, want 2", got)
	}
}

// TestInPlaceDefersRemediation: another Machine's remediation waits for an in-place update; the
// Machine being updated may itself be remediated.
func TestInPlaceDefersRemediation(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).threeMachines()
	updatingAnnotations(f.machines[0])
	unhealthy()(f.machines[2])
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileRemediation(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := e.deletedMachines(); len(got) > 0 {
		t.Errorf("deleted %v while m1 updates in place", got)
	}
	containsAll(t, "remediation", strings.Join(s.remediationMessages, "\n"), "waiting for the in-place update of Machine(s) m1 to complete before remediating Machine m3")

	f = inPlaceFixture(t).threeMachines()
	updatingAnnotations(f.machines[0])
	unhealthy()(f.machines[0])
	e = f.build()
	if _, err := e.r.reconcileRemediation(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if got := e.deletedMachines(); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("deleted %v, want the unhealthy Machine being updated, m1", got)
	}
}

func TestMarkHookPending(t *testing.T) {
	for _, tc := range []struct{ before, want string }{
		{"", "UpdateMachine"},
		{"AfterClusterUpgrade", "AfterClusterUpgrade,UpdateMachine"},
		{"UpdateMachine", "UpdateMachine"},
		{",Zeta", "UpdateMachine,Zeta"},
	} {
		m := &clusterv1.Machine{}
		if tc.before != "" {
			m.Annotations = map[string]string{runtimev1.PendingHooksAnnotation: tc.before}
		}
		changed := markHookPending(m, updateMachineHook)
		if got := m.Annotations[runtimev1.PendingHooksAnnotation]; got != tc.want || changed != (tc.before != tc.want) {
			t.Errorf("%q: got %q (changed %v), want %q", tc.before, got, changed, tc.want)
		}
		if !hookPending(m, "UpdateMachine") {
			t.Errorf("%q: not pending after marking", tc.before)
		}
	}
}

// TestInPlaceKeepsTheOwnedFieldsRecord: a KairosConfig the control plane created records which
// fields it set (managedFields); the in-place write adds the new image to that record, so the
// Machine is up to date afterwards, and compared on what the control plane set as before.
func TestInPlaceKeepsTheOwnedFieldsRecord(t *testing.T) {
	ctx := testContext(t)
	f := inPlaceFixture(t).replicas(1).maxSurge(0)
	e := f.build()
	if _, err := e.r.reconcileReplicas(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	e.settle(ctx)
	machines := e.listMachines()
	if len(machines) != 1 {
		t.Fatalf("%d Machines, want 1", len(machines))
	}
	name := machines[0].Name
	if _, ok := e.scope(ctx).ownedConfigs[name]; !ok {
		t.Fatalf("KairosConfig %s has no record of the control plane's fields", name)
	}

	f.upgrade()
	s := e.scope(ctx)
	if _, err := e.r.reconcileReplicas(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !e.inPlaceStarted(name) {
		t.Fatalf("%s not updated in place (wait %q, preflight %q, decision %q)", name, s.waitMessage, s.preflightMessages, s.inPlaceMessage)
	}
	e.finishInPlaceUpdate(ctx, name)
	s = e.scope(ctx)
	owned, ok := s.ownedConfigs[name]
	if !ok || owned.Image != newImage {
		t.Errorf("the control plane's fields of KairosConfig %s: %+v, want image %s", name, owned, newImage)
	}
	m := s.machines.Filter(func(m *clusterv1.Machine) bool { return m.Name == name }).Oldest()
	if ok, why := s.upToDate(m); !ok {
		t.Errorf("%s is outdated after its in-place update: %v", name, why)
	}
}
