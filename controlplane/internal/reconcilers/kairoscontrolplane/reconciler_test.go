package kairoscontrolplane

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

var kcpRequest = ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNS, Name: kcpName}}

func (e *env) getKCP() *controlplanev1.KairosControlPlane {
	e.t.Helper()
	kcp := &controlplanev1.KairosControlPlane{}
	if err := e.c.Get(context.Background(), kcpRequest.NamespacedName, kcp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return kcp
}

// firstReconcile runs the reconcile that only records the Paused condition (Cluster API's
// paused helper patches it and asks for a new reconcile).
func (e *env) firstReconcile(ctx context.Context) {
	e.t.Helper()
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		e.t.Fatal(err)
	}
	kcp := e.getKCP()
	if kcp == nil || conditions.Get(kcp, clusterv1.PausedCondition) == nil {
		e.t.Fatal("the first reconcile did not record the Paused condition")
	}
}

func TestReconcileNotFoundAndNoOwner(t *testing.T) {
	ctx := testContext(t)
	e := newFixture(t).build()
	if res, err := e.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNS, Name: "missing"}}); err != nil || !res.IsZero() {
		t.Errorf("missing KairosControlPlane: %+v, %v", res, err)
	}

	f := newFixture(t)
	f.kcp.OwnerReferences = nil
	e = f.build()
	if res, err := e.r.Reconcile(ctx, kcpRequest); err != nil || !res.IsZero() {
		t.Errorf("without owner Cluster: %+v, %v", res, err)
	}
	if kcp := e.getKCP(); len(kcp.Finalizers) != 0 || len(kcp.Status.Conditions) != 0 {
		t.Errorf("a KairosControlPlane without Cluster was touched: %v %v", kcp.Finalizers, kcp.Status.Conditions)
	}

	f = newFixture(t)
	f.kcp.OwnerReferences[0].Name = "gone"
	e = f.build()
	if _, err := e.r.Reconcile(ctx, kcpRequest); err == nil {
		t.Error("owner Cluster missing: no error")
	}
}

func TestReconcilePaused(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	f.cluster.Spec.Paused = ptr.To(true)
	e := f.build()
	for i := 0; i < 2; i++ {
		if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
			t.Fatal(err)
		}
	}
	kcp := e.getKCP()
	if !conditions.IsTrue(kcp, clusterv1.PausedCondition) {
		t.Errorf("Paused = %+v", conditions.Get(kcp, clusterv1.PausedCondition))
	}
	if len(e.listMachines()) != 0 || len(kcp.Finalizers) != 0 {
		t.Errorf("a paused control plane was reconciled: %d Machines, finalizers %v", len(e.listMachines()), kcp.Finalizers)
	}
}

// TestReconcileNewControlPlane runs Reconcile on a new control plane: finalizer, then the
// kubeconfig and the first Machine, with the status patched; initialized once the workload API
// answers.
func TestReconcileNewControlPlane(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	f.apiDown = true // no node serves the workload API yet
	f.kcp.Status = controlplanev1.KairosControlPlaneStatus{}
	f.kcp.Generation = 3
	f.objs = append(f.objs, clusterPKI(t)...)
	e := f.build()

	e.firstReconcile(ctx)
	if len(e.getKCP().Finalizers) != 0 || len(e.listMachines()) != 0 {
		t.Fatal("the Paused reconcile did more")
	}
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	if kcp := e.getKCP(); !controllerutil.ContainsFinalizer(kcp, Finalizer) || len(e.listMachines()) != 0 {
		t.Fatalf("first reconcile: finalizers %v, %d Machines", kcp.Finalizers, len(e.listMachines()))
	}

	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	if n := len(e.listMachines()); n != 1 {
		t.Fatalf("second reconcile created %d Machines, want 1", n)
	}
	if e.getKubeconfig() == nil {
		t.Error("no kubeconfig Secret")
	}
	kcp := e.getKCP()
	if kcp.Status.ObservedGeneration != 3 {
		t.Errorf("observedGeneration = %d, want 3", kcp.Status.ObservedGeneration)
	}
	if kcp.Status.Selector == "" || kcp.Status.Replicas == nil {
		t.Errorf("status not patched: %+v", kcp.Status)
	}
	assertCondition(t, kcp, controlplanev1.InitializedCondition, metav1.ConditionFalse, controlplanev1.NotInitializedReason, "")
	assertCondition(t, kcp, controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "created a control-plane Machine")
	assertCondition(t, kcp, controlplanev1.CertificatesAvailableCondition, metav1.ConditionTrue, controlplanev1.CertificatesAvailableReason, "")
	assertCondition(t, kcp, clusterv1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason, "")

	// The Machine has no node yet and nothing answers: the control plane waits, creating nothing.
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	if n := len(e.listMachines()); n != 1 {
		t.Fatalf("third reconcile: %d Machines, want 1", n)
	}
	assertCondition(t, e.getKCP(), controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "to initialize the control plane")

	// Its node serves the API, before Cluster API links its Node: the control plane is
	// initialized (Cluster API watches Nodes only from then on).
	cache := e.r.ClusterCache.(testClusterCache)
	cache.apiDown = false
	e.r.ClusterCache = cache
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	kcp = e.getKCP()
	if !ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false) {
		t.Error("not initialized once the workload API answered")
	}
	assertCondition(t, kcp, controlplanev1.InitializedCondition, metav1.ConditionTrue, controlplanev1.InitializedReason, "")
	if n := len(e.listMachines()); n != 1 {
		t.Fatalf("scaled up past a Machine without a Node: %d Machines", n)
	}

	// Its Node is linked.
	m := e.listMachines()[0]
	m.Status.NodeRef.Name = m.Name
	if err := e.c.Status().Update(ctx, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	kcp = e.getKCP()
	// The Machine is not ready: the second one waits for it.
	if n := len(e.listMachines()); n != 1 {
		t.Errorf("scaled up past a Machine that is not ready: %d Machines", n)
	}
	assertCondition(t, kcp, controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "is not ready")
}

func TestReconcileErrorKeepsObservedGeneration(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	f.kcp.Finalizers = []string{Finalizer}
	f.kcp.Generation = 2
	f.kcp.Status.ObservedGeneration = 1
	f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "missing"
	f.objs = append(f.objs, clusterPKI(t)...)
	e := f.build()
	e.firstReconcile(ctx)
	if _, err := e.r.Reconcile(ctx, kcpRequest); err == nil || !strings.Contains(err.Error(), "cloning the infrastructure template") {
		t.Fatalf("error = %v", err)
	}
	kcp := e.getKCP()
	if kcp.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration = %d after a failed reconcile, want 1", kcp.Status.ObservedGeneration)
	}
	assertCondition(t, kcp, controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "TestMachineTemplate missing does not exist")
}

func TestReconcileScopeError(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.Finalizers = []string{Finalizer}
	f.machine("m1", time.Hour)
	f.noCRDs = true
	e := f.build()
	e.firstReconcile(ctx)
	if _, err := e.r.Reconcile(ctx, kcpRequest); err == nil {
		t.Error("no error without the infrastructure CRD")
	}
}

func TestReconcileHaltsAtPrerequisites(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t).notInitialized()
	f.kcp.Finalizers = []string{Finalizer}
	f.cluster.Status.Initialization.InfrastructureProvisioned = nil
	f.objs = append(f.objs, clusterPKI(t)...)
	e := f.build()
	e.firstReconcile(ctx)
	res, err := e.r.Reconcile(ctx, kcpRequest)
	if err != nil || !res.IsZero() {
		t.Fatalf("Reconcile = %+v, %v", res, err)
	}
	if e.getKubeconfig() != nil || len(e.listMachines()) != 0 {
		t.Error("went past the prerequisites")
	}
	assertCondition(t, e.getKCP(), controlplanev1.ScalingUpCondition, metav1.ConditionTrue, controlplanev1.ScalingUpReason, "infrastructure to be provisioned")
}

func TestReconcileDeletedControlPlane(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.DeletionTimestamp = ptr.To(metav1.Now())
	f.kcp.Finalizers = []string{Finalizer}
	f.machine("m1", time.Hour)
	e := f.build()
	e.firstReconcile(ctx)
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	kcp := e.getKCP()
	if kcp == nil {
		t.Fatal("KairosControlPlane gone while a Machine is left")
	}
	assertCondition(t, kcp, controlplanev1.DeletingCondition, metav1.ConditionTrue, controlplanev1.DeletingWaitingForMachinesReason, "m1")
	if m := e.getMachine("m1"); m.DeletionTimestamp.IsZero() || hasHook(m) {
		t.Errorf("m1 not deleted or hook kept: %v %v", m.DeletionTimestamp, m.Annotations)
	}

	// The Machine goes; the finalizer is removed and the object with it.
	m := e.getMachine("m1")
	m.Finalizers = nil
	if err := e.c.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reconcile(ctx, kcpRequest); err != nil {
		t.Fatal(err)
	}
	if kcp := e.getKCP(); kcp != nil {
		t.Errorf("KairosControlPlane still there with finalizers %v", kcp.Finalizers)
	}
}

func TestReconcileNormalPhasesCombineRequeues(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour, notReady())
	e := f.build()
	if _, err := e.r.reconcileNormal(ctx, e.scope(ctx)); err != nil { // creates the kubeconfig
		t.Fatal(err)
	}
	s := e.scope(ctx)
	res, err := e.r.reconcileNormal(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing to do but look at etcd's health again.
	if res.RequeueAfter != e.r.HealthInterval || s.halted {
		t.Errorf("settled control plane: result %+v, halted %v %q", res, s.halted, s.waitMessage)
	}
	// A Machine deleting: the hook phase asks for a short requeue and halts.
	f.machines[2].DeletionTimestamp = ptr.To(metav1.Now())
	e = f.build()
	s = e.scope(ctx)
	res, err = e.r.reconcileNormal(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != requeueWhileBusy || !s.halted {
		t.Errorf("deleting Machine: result %+v, halted %v", res, s.halted)
	}
}

// TestReconcileNormalRequeuesAtRolloutAfter: a rollout.after in the future makes
// reconcileNormal requeue no later than that time, so that the rollout starts then without
// another event.
func TestReconcileNormalRequeuesAtRolloutAfter(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour)
	f.machine("m3", time.Hour)
	f.kcp.Spec.Rollout.After = metav1.NewTime(time.Now().Add(time.Minute))
	e := f.build()
	if _, err := e.r.reconcileNormal(ctx, e.scope(ctx)); err != nil { // creates the kubeconfig
		t.Fatal(err)
	}
	res, err := e.r.reconcileNormal(ctx, e.scope(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("RequeueAfter = %s, want at most 1m (when rollout.after passes)", res.RequeueAfter)
	}
}

func TestClusterToKairosControlPlane(t *testing.T) {
	f := newFixture(t)
	got := clusterToKairosControlPlane(context.Background(), f.cluster)
	if len(got) != 1 || got[0] != kcpRequest {
		t.Errorf("requests = %v, want [%v]", got, kcpRequest)
	}
	other := f.cluster.DeepCopy()
	other.Spec.ControlPlaneRef.Kind = "KubeadmControlPlane"
	if got := clusterToKairosControlPlane(context.Background(), other); got != nil {
		t.Errorf("another kind mapped: %v", got)
	}
	other = f.cluster.DeepCopy()
	other.Spec.ControlPlaneRef.APIGroup = "example.com"
	if got := clusterToKairosControlPlane(context.Background(), other); got != nil {
		t.Errorf("another group mapped: %v", got)
	}
	if got := clusterToKairosControlPlane(context.Background(), &corev1.Secret{}); got != nil {
		t.Errorf("a Secret mapped: %v", got)
	}
}

func TestSetupWithManagerNeedsDependencies(t *testing.T) {
	for _, r := range []*Reconciler{{}, {Client: newFixture(t).build().c}} {
		if err := r.SetupWithManager(context.Background(), nil, controller.Options{}); err == nil {
			t.Error("SetupWithManager without dependencies did not fail")
		}
	}
}
