package kairoscontrolplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/contract"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
)

const (
	testNS       = "team-a"
	clusterName  = "demo"
	kcpName      = "demo-cp"
	testVersion  = "v1.31.2"
	infraGroup   = "infrastructure.cluster.x-k8s.io"
	templateKind = "TestMachineTemplate"
	infraKind    = "TestMachine"
	templateName = "cp-small"
	// contractVersions is the CRD contract label value: the last version is the one to use.
	contractVersions = "v1beta1_v1beta2"
	machineFinalizer = "machine.cluster.x-k8s.io"
)

var (
	infraGV = schema.GroupVersion{Group: infraGroup, Version: "v1beta2"}
)

// testScheme knows CRDs as typed objects: the fake client would otherwise register their kind
// for metadata only on the first PartialObjectMetadata read, and later fake clients of the test
// binary would drop the spec of the CRDs they are given.
var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

func testContext(t *testing.T) context.Context {
	t.Helper()
	return ctrl.LoggerInto(t.Context(), testr.New(t))
}

// testClusterCache is Cluster API's fake ClusterCache, connected to the fake workload client,
// with what the fake does not model: a workload API server that stopped answering its probes.
type testClusterCache struct {
	clustercache.ClusterCache
	apiDown bool
}

func (c testClusterCache) GetHealthCheckingState(ctx context.Context, key client.ObjectKey) clustercache.HealthCheckingState {
	if c.apiDown {
		return clustercache.HealthCheckingState{LastProbeTime: time.Now(), LastProbeSuccessTime: time.Now().Add(-time.Minute), ConsecutiveFailures: 3}
	}
	return c.ClusterCache.GetHealthCheckingState(ctx, key)
}

// member is the etcd membership of a Machine's node as the distribution reports it.
type member int

const (
	memberJoined member = iota + 1
	memberNotJoined
	// memberLeft: k0s keeps the EtcdMember with spec.leave and Joined=False; k3s annotates
	// the Node with the removed annotation.
	memberLeft
	// memberLeaving: leave requested, still joined.
	memberLeaving
)

// fixture describes the management and workload clusters of one test.
type fixture struct {
	t       *testing.T
	now     time.Time
	cluster *clusterv1.Cluster
	kcp     *controlplanev1.KairosControlPlane

	machines []*clusterv1.Machine
	configs  map[string]*bootstrapv1.KairosConfig
	infras   map[string]*unstructured.Unstructured
	// members are keyed by node name (the Machine name).
	members map[string]member

	objs         []client.Object
	workloadObjs []client.Object
	// etcd is the workload cluster's etcd, as its members answer.
	etcd *fakeEtcd
	// apiDown: Cluster API's ClusterCache fails to probe the workload API server.
	apiDown bool
	// listing, when set, is the scope's last listing of the snapshot store.
	listing *snapshotListing
	// hostSeq numbers the addresses of Machines created during a test.
	hostSeq int
	// noPKI leaves out the cluster certificates (which the fixture adds otherwise).
	noPKI bool
	// noCRDs leaves out the infrastructure CRDs.
	noCRDs bool
	// bootstrapCRD is the installed KairosConfig CRD; default: bootstrapCRDObject("").
	// noBootstrapCRD leaves it out.
	bootstrapCRD   *unstructured.Unstructured
	noBootstrapCRD bool
	interceptor    *interceptor.Funcs
	// workloadInterceptor intercepts the fake workload client's calls.
	workloadInterceptor *interceptor.Funcs
	// runtime is the Reconciler's runtime client (in-place updates); nil for none.
	runtime *fakeRuntimeClient
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	now := time.Now().Truncate(time.Second)
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: clusterName, UID: "cluster-uid"},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.demo.example.com", Port: 6443},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: kcpName},
		},
		Status: clusterv1.ClusterStatus{Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)}},
	}
	kcp := &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: kcpName, UID: "kcp-uid", Generation: 1,
			Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: clusterName, UID: "cluster-uid"}},
		},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas:     ptr.To[int32](3),
			Version:      testVersion,
			Distribution: bootstrapv1.DistributionK0s,
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: templateKind, Name: templateName},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret", PreCommands: []string{"echo hello"}},
		},
	}
	kcp.Spec.Default()
	kcp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	return &fixture{
		t: t, now: now, cluster: cluster, kcp: kcp,
		configs: map[string]*bootstrapv1.KairosConfig{}, infras: map[string]*unstructured.Unstructured{}, members: map[string]member{},
		etcd: newFakeEtcd(),
	}
}

// address is the InternalIP the fixture gives the n-th Machine.
func address(n int) string { return fmt.Sprintf("10.0.0.%d", n+10) }

// memberName is the etcd member name a distribution gives a node: k0s uses the node name,
// k3s the node name and eight hex digits.
func (f *fixture) memberName(node string) string {
	if f.kcp.Spec.Distribution == bootstrapv1.DistributionK3s {
		return node + "-1a2b3c4d"
	}
	return node
}

// member returns the fake etcd member of a Machine's node.
func (f *fixture) member(machine string) *fakeMember {
	f.t.Helper()
	m := f.etcd.byName(f.memberName(machine))
	if m == nil {
		f.t.Fatalf("no etcd member for Machine %s", machine)
	}
	return m
}

func (f *fixture) k3s() *fixture {
	f.kcp.Spec.Distribution = bootstrapv1.DistributionK3s
	return f
}

func (f *fixture) replicas(n int32) *fixture {
	f.kcp.Spec.Replicas = ptr.To(n)
	return f
}

func (f *fixture) notInitialized() *fixture {
	f.kcp.Status.Initialization.ControlPlaneInitialized = nil
	return f
}

func (f *fixture) maxSurge(n int) *fixture {
	f.kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intOrString(n))
	return f
}

func (f *fixture) failureDomains(names ...string) *fixture {
	for _, n := range names {
		f.cluster.Status.FailureDomains = append(f.cluster.Status.FailureDomains, clusterv1.FailureDomain{Name: n, ControlPlane: ptr.To(true)})
	}
	return f
}

func intOrString(n int) intstr.IntOrString { return intstr.FromInt(n) }

func condition(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}
}

// machine adds a settled control-plane Machine created age ago: ready, available, with a
// node, a joined etcd member, its KairosConfig (built from the control plane's current spec)
// and its infrastructure machine (cloned from the current template).
func (f *fixture) machine(name string, age time.Duration, opts ...func(*clusterv1.Machine)) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name, UID: k8stypes.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(f.now.Add(-age)),
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: clusterName, clusterv1.MachineControlPlaneLabel: "", controlplanev1.ControlPlaneNameLabel: kcpName,
			},
			Annotations:     map[string]string{controlplanev1.EtcdMemberHookAnnotation: ""},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(f.kcp, controlplanev1.GroupVersion.WithKind("KairosControlPlane"))},
			Finalizers:      []string{machineFinalizer},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Version:     f.kcp.Spec.Version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: infraKind, Name: name},
		},
		Status: clusterv1.MachineStatus{
			NodeRef: clusterv1.MachineNodeReference{Name: name},
			Conditions: []metav1.Condition{
				condition(clusterv1.MachineReadyCondition, metav1.ConditionTrue, clusterv1.MachineReadyReason),
				condition(clusterv1.MachineAvailableCondition, metav1.ConditionTrue, clusterv1.MachineAvailableReason),
			},
		},
	}
	owner := metav1.OwnerReference{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KairosControlPlane", Name: kcpName, UID: f.kcp.UID}
	f.configs[name] = &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: copyMap(m.Labels), OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       *desiredstate.KairosConfigSpec(&f.kcp.Spec.KairosConfigSpec, f.kcp.Spec.Distribution, ptr.Deref(f.kcp.Spec.Replicas, 1) == 1, f.kcp.Spec.Etcd.Snapshots),
	}
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(infraGV.String())
	infra.SetKind(infraKind)
	infra.SetNamespace(testNS)
	infra.SetName(name)
	infra.SetLabels(copyMap(m.Labels))
	infra.SetAnnotations(map[string]string{
		clusterv1.TemplateClonedFromNameAnnotation:      f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name,
		clusterv1.TemplateClonedFromGroupKindAnnotation: f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.GroupKind().String(),
	})
	infra.SetOwnerReferences([]metav1.OwnerReference{owner})
	// The spec cloned from the template (infraTemplate(templateName, "small")).
	_ = unstructured.SetNestedField(infra.Object, "small", "spec", "size")
	f.infras[name] = infra
	f.members[name] = memberJoined
	host := address(len(f.machines))
	m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: host}, {Type: clusterv1.MachineHostName, Address: name}}
	for _, o := range opts {
		o(m)
	}
	if m.Status.NodeRef.IsDefined() {
		f.etcd.add(f.memberName(name), host)
	} else {
		delete(f.members, name)
	}
	f.machines = append(f.machines, m)
	return m
}

func copyMap(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Machine options.

func withVersion(v string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { m.Spec.Version = v }
}

func inFailureDomain(fd string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { m.Spec.FailureDomain = fd }
}

func withCondition(typ string, status metav1.ConditionStatus, reason string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = slices.DeleteFunc(m.Status.Conditions, func(c metav1.Condition) bool { return c.Type == typ })
		m.Status.Conditions = append(m.Status.Conditions, condition(typ, status, reason))
	}
}

func notReady() func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		withCondition(clusterv1.MachineReadyCondition, metav1.ConditionFalse, clusterv1.MachineNotReadyReason)(m)
		withCondition(clusterv1.MachineAvailableCondition, metav1.ConditionFalse, clusterv1.MachineNotReadyReason)(m)
	}
}

func notAvailable() func(*clusterv1.Machine) {
	return withCondition(clusterv1.MachineAvailableCondition, metav1.ConditionFalse, clusterv1.MachineNotReadyReason)
}

func withoutAddresses() func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { m.Status.Addresses = nil }
}

func withoutNode() func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { m.Status.NodeRef = clusterv1.MachineNodeReference{} }
}

func withAnnotation(k, v string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { m.Annotations[k] = v }
}

func withoutHook() func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) { delete(m.Annotations, controlplanev1.EtcdMemberHookAnnotation) }
}

// deleting marks the Machine deleted; reason is its Deleting condition reason ("" for none).
func deleting(since time.Duration, reason string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now().Add(-since)))
		if reason != "" {
			withCondition(clusterv1.MachineDeletingCondition, metav1.ConditionTrue, reason)(m)
			m.Status.Conditions[len(m.Status.Conditions)-1].LastTransitionTime = *m.DeletionTimestamp
		}
	}
}

// unhealthy marks the Machine as a MachineHealthCheck does when it asks the owner to remediate.
func unhealthy() func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		withCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckUnhealthyNodeReason)(m)
		withCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason)(m)
	}
}

// infrastructureGone is what Cluster API's machine controller sets once the Machine's InfraMachine
// was deleted after provisioning (the VM deleted on the hypervisor).
func infrastructureGone() func(*clusterv1.Machine) {
	return withCondition(clusterv1.MachineInfrastructureReadyCondition, metav1.ConditionFalse, clusterv1.MachineInfrastructureDeletedReason)
}

func crdObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	u.SetName(contract.CalculateCRDName(infraGroup, kind))
	u.SetLabels(map[string]string{"cluster.x-k8s.io/v1beta2": contractVersions})
	return u
}

// bootstrapCRDObject is the KairosConfig CRD as a bootstrap provider release installs it:
// contract label, v1beta2 served and stored, and the release annotation when release is set.
func bootstrapCRDObject(release string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	u.SetName(kairosConfigCRDName)
	u.SetLabels(map[string]string{"cluster.x-k8s.io/v1beta2": "v1beta2"})
	if release != "" {
		u.SetAnnotations(map[string]string{bootstrapv1.ReleaseAnnotation: release})
	}
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "v1beta2", "served": true, "storage": true}}, "spec", "versions")
	return u
}

func infraTemplate(name, size string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(infraGV.String())
	u.SetKind(templateKind)
	u.SetNamespace(testNS)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, size, "spec", "template", "spec", "size")
	return u
}

var (
	pkiOnce    sync.Once
	pkiObjects []corev1.Secret
	pkiErr     error
)

// clusterPKI returns the cluster certificate Secrets, generated once per test binary.
func clusterPKI(t *testing.T) []client.Object {
	t.Helper()
	pkiOnce.Do(func() {
		c := fake.NewClientBuilder().WithScheme(testScheme).Build()
		owner := metav1.OwnerReference{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KairosControlPlane", Name: kcpName, UID: "kcp-uid", Controller: ptr.To(true)}
		key := client.ObjectKey{Namespace: testNS, Name: clusterName}
		if _, pkiErr = clustersecret.LookupOrGeneratePKI(context.Background(), c, key, owner); pkiErr != nil {
			return
		}
		list := &corev1.SecretList{}
		pkiErr = c.List(context.Background(), list)
		pkiObjects = list.Items
	})
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	var out []client.Object
	for i := range pkiObjects {
		s := pkiObjects[i].DeepCopy()
		s.ResourceVersion = ""
		out = append(out, s)
	}
	return out
}

// env is a built fixture: a Reconciler on a fake management client, with a fake workload
// client behind a stub ClusterCache.
type env struct {
	*fixture
	r     *Reconciler
	c     client.Client
	wc    client.Client
	cache testClusterCache
	ctrl  *recordingController
}

func (f *fixture) build() *env {
	f.t.Helper()
	objs := []client.Object{f.cluster, f.kcp, infraTemplate(templateName, "small")}
	if !f.noCRDs {
		objs = append(objs, crdObject(templateKind), crdObject(infraKind))
	}
	if !f.noBootstrapCRD {
		crd := f.bootstrapCRD
		if crd == nil {
			crd = bootstrapCRDObject("")
		}
		objs = append(objs, crd)
	}
	for _, m := range f.machines {
		objs = append(objs, m)
		if c, ok := f.configs[m.Name]; ok {
			objs = append(objs, c)
		}
		if i, ok := f.infras[m.Name]; ok {
			objs = append(objs, i)
		}
	}
	objs = append(objs, f.objs...)
	for _, p := range clusterPKI(f.t) {
		if !f.noPKI && !slices.ContainsFunc(f.objs, func(o client.Object) bool { return o.GetName() == p.GetName() && o.GetNamespace() == p.GetNamespace() }) {
			objs = append(objs, p)
		}
	}
	b := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(objs...).WithReturnManagedFields().
		WithStatusSubresource(&clusterv1.Machine{}, &controlplanev1.KairosControlPlane{}, &bootstrapv1.KairosConfig{})
	if f.interceptor != nil {
		b = b.WithInterceptorFuncs(*f.interceptor)
	}
	c := b.Build()

	wobjs := slices.Clone(f.workloadObjs)
	for name, mem := range f.members {
		wobjs = append(wobjs, workloadMember(f.kcp.Spec.Distribution, name, mem)...)
	}
	wb := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(wobjs...)
	if f.workloadInterceptor != nil {
		wb = wb.WithInterceptorFuncs(*f.workloadInterceptor)
	}
	wc := wb.Build()
	cache := testClusterCache{ClusterCache: clustercache.NewFakeClusterCache(wc, client.ObjectKeyFromObject(f.cluster)), apiDown: f.apiDown}
	rc := &recordingController{FakeController: capicontrollerutil.NewFakeController()}
	r := &Reconciler{Client: c, APIReader: c, ClusterCache: cache, controller: rc, HealthInterval: defaultHealthInterval,
		machineDeleter: capicontrollerutil.NewClientWithDeleteResponseFromClient(c), etcdDialers: f.etcd.factory()}
	if f.runtime != nil {
		r.RuntimeClient = f.runtime
	}
	return &env{fixture: f, c: c, wc: wc, cache: cache, r: r, ctrl: rc}
}

// recordingController records the cache waits a reconciliation asks for.
type recordingController struct {
	*capicontrollerutil.FakeController
	waits []string
}

func (c *recordingController) DeferNextReconcileUntilCacheUpToDate(_ metav1.Object, gvkt capicontrollerutil.GroupVersionKindType, rv string) {
	c.waits = append(c.waits, gvkt.Kind+"@"+rv)
}

// workloadMember returns the workload objects that report a node's etcd membership.
func workloadMember(dist bootstrapv1.Distribution, name string, mem member) []client.Object {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if dist == bootstrapv1.DistributionK3s {
		node.Annotations[k3sEtcdNodeNameAnnotation] = name + "-1a2b3c4d"
		switch mem {
		case memberLeft:
			node.Annotations[k3sEtcdRemovedAnnotation] = name + "-1a2b3c4d"
			node.Annotations[k3sEtcdRemoveAnnotation] = "true"
		case memberLeaving:
			node.Annotations[k3sEtcdRemoveAnnotation] = "true"
		case memberNotJoined:
			// k3s has no "not joined" state on the Node: a node that is no member has no annotation.
			delete(node.Annotations, k3sEtcdNodeNameAnnotation)
		}
		return []client.Object{node}
	}
	return []client.Object{node, k0sMember(name, mem == memberLeft || mem == memberLeaving, mem == memberJoined || mem == memberLeaving)}
}

func k0sMember(name string, leave, joined bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k0sEtcdMemberGVK)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, leave, "spec", "leave")
	status := "False"
	if joined {
		status = "True"
	}
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Joined", "status": status}}, "status", "conditions")
	return u
}

// scope builds the scope the way Reconcile does.
func (e *env) scope(ctx context.Context) *scope {
	e.t.Helper()
	s, err := e.r.newScope(ctx, e.kcp, e.cluster)
	if err != nil {
		e.t.Fatalf("newScope: %v", err)
	}
	return s
}

// settle plays the world between two steps of a test that runs only some phases: deleting
// Machines go through the real pre-terminate hook (their members leave etcd because the hook
// made them, as world plays the distribution), new Machines get an address, a ready Node and an
// etcd member.
func (e *env) settle(ctx context.Context) {
	e.t.Helper()
	for range 20 {
		e.world(ctx)
		deleting := false
		for _, m := range e.listMachines() {
			deleting = deleting || !m.DeletionTimestamp.IsZero()
		}
		if !deleting {
			return
		}
		if _, err := e.r.reconcilePreTerminateHooks(ctx, e.scope(ctx)); err != nil {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("deleting Machines did not go: %v; etcd members %v", e.listMachineNames(), e.etcd.names())
}

// world plays Cluster API's Machine controller and the distribution between reconciliations,
// with the pre-terminate hook honoured: a deleting Machine waits for the hook, then goes; a k0s
// EtcdMember asked to leave, or a k3s Node annotated for removal, leaves etcd; a new Machine gets
// an address, a ready Node and an etcd member. A Machine that goes takes its VM with it: its etcd
// member stops, and stays in etcd's member list unless something removed it (as in reality:
// nothing but a member remove takes a member out of the list).
func (e *env) world(ctx context.Context) {
	e.t.Helper()
	for _, m := range e.listMachines() {
		if m.DeletionTimestamp.IsZero() || !hasHook(&m) {
			continue
		}
		if c := conditions.Get(&m, clusterv1.MachineDeletingCondition); c == nil || c.Reason != clusterv1.MachineDeletingWaitingForPreTerminateHookReason {
			withCondition(clusterv1.MachineDeletingCondition, metav1.ConditionTrue, clusterv1.MachineDeletingWaitingForPreTerminateHookReason)(&m)
			if err := e.c.Status().Update(ctx, &m); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(k0sEtcdMemberGVK.GroupVersion().WithKind("EtcdMemberList"))
	if err := e.wc.List(ctx, list); err == nil {
		for _, u := range list.Items {
			if leave, _, _ := unstructured.NestedBool(u.Object, "spec", "leave"); leave {
				e.etcd.removeByName(u.GetName())
			}
		}
	}
	nodes := &corev1.NodeList{}
	if err := e.wc.List(ctx, nodes); err == nil {
		for _, n := range nodes.Items {
			if n.Annotations[k3sEtcdRemoveAnnotation] == "true" {
				e.etcd.removeByName(n.Annotations[k3sEtcdNodeNameAnnotation])
			}
		}
	}
	for _, m := range e.listMachines() {
		if !m.DeletionTimestamp.IsZero() && !hasHook(&m) {
			if mem := e.etcd.byName(e.memberName(m.Name)); mem != nil {
				e.etcd.setState(mem, memberDown)
			}
			m.Finalizers = nil
			if err := e.c.Update(ctx, &m); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	for _, m := range e.listMachines() {
		if m.DeletionTimestamp.IsZero() && !m.Status.NodeRef.IsDefined() {
			e.joinNode(ctx, &m)
		}
	}
}

// joinNode gives a new Machine an address, a ready Node and an etcd member.
func (e *env) joinNode(ctx context.Context, m *clusterv1.Machine) {
	e.t.Helper()
	e.hostSeq++
	host := fmt.Sprintf("10.0.1.%d", e.hostSeq)
	m.Status.NodeRef.Name = m.Name
	m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: host}}
	withCondition(clusterv1.MachineReadyCondition, "True", clusterv1.MachineReadyReason)(m)
	withCondition(clusterv1.MachineAvailableCondition, "True", clusterv1.MachineAvailableReason)(m)
	if err := e.c.Status().Update(ctx, m); err != nil {
		e.t.Fatal(err)
	}
	e.etcd.add(e.memberName(m.Name), host)
	for _, o := range workloadMember(e.kcp.Spec.Distribution, m.Name, memberJoined) {
		if err := e.wc.Create(ctx, o); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) listMachineNames() []string {
	var out []string
	for _, m := range e.listMachines() {
		out = append(out, m.Name)
	}
	return out
}

// getMachine reads a Machine back; nil when it is gone.
func (e *env) getMachine(name string) *clusterv1.Machine {
	e.t.Helper()
	m := &clusterv1.Machine{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, m); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		e.t.Fatal(err)
	}
	return m
}

// listMachines reads all Machines, sorted by name.
func (e *env) listMachines() []clusterv1.Machine {
	e.t.Helper()
	list := &clusterv1.MachineList{}
	if err := e.c.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b clusterv1.Machine) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// newMachines returns the Machines the fixture did not start with.
func (e *env) newMachines() []clusterv1.Machine {
	var out []clusterv1.Machine
	for _, m := range e.listMachines() {
		if !slices.ContainsFunc(e.machines, func(o *clusterv1.Machine) bool { return o.Name == m.Name }) {
			out = append(out, m)
		}
	}
	return out
}

// deletedMachines names the fixture's Machines that are now deleting (or gone) but were not.
func (e *env) deletedMachines() []string {
	var out []string
	for _, orig := range e.machines {
		if !orig.DeletionTimestamp.IsZero() {
			continue
		}
		if m := e.getMachine(orig.Name); m == nil || !m.DeletionTimestamp.IsZero() {
			out = append(out, orig.Name)
		}
	}
	return out
}

func (e *env) getK0sMember(name string) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k0sEtcdMemberGVK)
	if err := e.wc.Get(context.Background(), client.ObjectKey{Name: name}, u); err != nil {
		e.t.Fatal(err)
	}
	return u
}

func (e *env) getNode(name string) *corev1.Node {
	e.t.Helper()
	n := &corev1.Node{}
	if err := e.wc.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func hasHook(m *clusterv1.Machine) bool {
	_, ok := m.Annotations[controlplanev1.EtcdMemberHookAnnotation]
	return ok
}

func containsAll(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}
