package kairosconfig

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/token"
)

const ns = "team-a"

// stubTokens records the calls the reconciler makes to the workload cluster.
type stubTokens struct {
	mu                              sync.Mutex
	created                         []createCall
	refreshed                       []refreshCall
	createErr, refreshErr, readyErr error
}

type createCall struct {
	cluster client.ObjectKey
	token   token.BootstrapToken
	role    token.K0sTokenRole
	expires time.Time
}

type refreshCall struct {
	cluster client.ObjectKey
	id      string
	expires time.Time
}

func (s *stubTokens) Create(_ context.Context, cluster client.ObjectKey, t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, createCall{cluster, t, role, expires})
	return s.createErr
}

func (s *stubTokens) Ready(context.Context, client.ObjectKey) error { return s.readyErr }

func (s *stubTokens) Refresh(_ context.Context, cluster client.ObjectKey, id string, expires, _ time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshed = append(s.refreshed, refreshCall{cluster, id, expires})
	return expires, s.refreshErr
}

var _ WorkloadTokens = &stubTokens{}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&bootstrapv1.KairosConfig{}).Build()
}

func newCluster() *clusterv1.Cluster {
	return &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo", UID: "cluster-uid"},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "api.demo.example.com", Port: 6443}},
		Status: clusterv1.ClusterStatus{Initialization: clusterv1.ClusterInitializationStatus{
			InfrastructureProvisioned: ptr.To(true),
		}},
	}
}

func newMachine(name, version string) *clusterv1.Machine {
	return &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID("machine-uid-" + name),
			Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec: clusterv1.MachineSpec{
			ClusterName: "demo",
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name}},
		},
	}
}

func newConfig(name string, spec bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfig {
	spec.Default()
	return &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID("config-uid-" + name),
			Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: k8stypes.UID("machine-uid-" + name)}},
		},
		Spec: spec,
	}
}

// clusterPKI is the certificate Secrets of Cluster demo, generated once.
var clusterPKI = sync.OnceValues(func() ([]client.Object, error) {
	var objs []client.Object
	for _, p := range []secret.Purpose{secret.ClusterCA, secret.EtcdCA, secret.FrontProxyCA, secret.ServiceAccount} {
		var kp *pki.KeyPair
		var err error
		if p == secret.ServiceAccount {
			kp, err = pki.NewServiceAccountKeyPair()
		} else {
			kp, err = pki.NewCA(string(p), time.Hour)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name("demo", p), Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
			Data:       map[string][]byte{secret.TLSCrtDataName: kp.Cert, secret.TLSKeyDataName: kp.Key},
		})
	}
	return objs, nil
})

func pkiObjects(t *testing.T) []client.Object {
	t.Helper()
	objs, err := clusterPKI()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]client.Object, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopyObject().(client.Object)
	}
	return out
}

// reconcile runs Reconcile until the config has data or nothing changes (the first pass only
// records the Paused condition).
func reconcile(t *testing.T, r *Reconciler, name string) (ctrl.Result, *bootstrapv1.KairosConfig) {
	t.Helper()
	var res ctrl.Result
	config := &bootstrapv1.KairosConfig{}
	for range 3 {
		var err error
		res, err = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
		if err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, config); err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
			break
		}
	}
	return res, config
}

func TestSameVersion(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"v1.31.2", "v1.31.2", true},
		{"v1.31.2+k3s1", "v1.31.2", true},
		{"v1.31.2", "v1.31.2+k0s.0", true},
		{"v1.31.2+k3s1", "v1.31.2+k3s2", true},
		{"v1.31.2", "v1.31.3", false},
		{"v1.31.2", "1.31.2", false},
		{"v1.31.2-rc.1", "v1.31.2", false},
		{"v1.31.2-rc.1+k3s1", "v1.31.2-rc.1", true},
		{"", "", true},
	}
	for _, tc := range tests {
		if got := sameVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("sameVersion(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := sameVersion(tc.b, tc.a); got != tc.want {
			t.Errorf("sameVersion(%q, %q) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestReconcilePrerequisites(t *testing.T) {
	pool := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "demo", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.31.2"}}}}
	tests := []struct {
		name          string
		cluster       func(*clusterv1.Cluster)
		role          bootstrapv1.Role
		specVersion   string
		image         string
		owner         *configOwner
		wantReason    string
		wantMessage   []string
		wantVersion   string
		wantEndpoint  string
		wantClusterNm string
	}{
		{name: "infrastructure not provisioned", cluster: func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = nil },
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantReason: bootstrapv1.WaitingForClusterInfrastructureReason,
			wantMessage: []string{"Cluster demo infrastructure is not provisioned yet"}},
		{name: "infrastructure provisioned false", cluster: func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = ptr.To(false) },
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantReason: bootstrapv1.WaitingForClusterInfrastructureReason},
		{name: "no endpoint", cluster: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{} },
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantReason: bootstrapv1.WaitingForControlPlaneEndpointReason,
			wantMessage: []string{"Cluster demo has no spec.controlPlaneEndpoint yet"}},
		{name: "endpoint without port", cluster: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Port = 0 },
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantReason: bootstrapv1.WaitingForControlPlaneEndpointReason},
		{name: "no version anywhere", owner: &configOwner{machine: newMachine("m", "")},
			wantReason: bootstrapv1.WaitingForKubernetesVersionReason, wantMessage: []string{"set spec.kubernetesVersion, or spec.version of Machine m"}},
		{name: "no version in the pool", owner: &configOwner{pool: &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}},
			wantReason: bootstrapv1.WaitingForKubernetesVersionReason, wantMessage: []string{"spec.version of MachinePool pool"}},
		{name: "version mismatch", specVersion: "v1.31.2", owner: &configOwner{machine: newMachine("m", "v1.30.0")},
			wantReason:  bootstrapv1.InvalidConfigurationReason,
			wantMessage: []string{"spec.kubernetesVersion v1.31.2 differs from Machine m spec.version v1.30.0", "make them equal or leave spec.kubernetesVersion empty"}},
		{name: "image of another version than the Machine", image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.32.0-k3s1",
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantReason: bootstrapv1.InvalidConfigurationReason,
			wantMessage: []string{"spec.image quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.32.0-k3s1 ships k3s v1.32.0+k3s1", "Machine m spec.version is v1.31.2", "use the image of v1.31.2"}},
		{name: "image of another version than the spec", image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.32.0-k3s1", specVersion: "v1.31.2+k3s1",
			owner: &configOwner{machine: newMachine("m", "")}, wantReason: bootstrapv1.InvalidConfigurationReason,
			wantMessage: []string{"but spec.kubernetesVersion is v1.31.2+k3s1"}},
		{name: "image of the Machine's version", image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1",
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantVersion: "v1.31.2", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
		{name: "image whose tag names no version", image: "registry.local/edge/kairos:custom",
			owner: &configOwner{machine: newMachine("m", "v1.31.2")}, wantVersion: "v1.31.2", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
		{name: "MachinePool control plane", role: bootstrapv1.RoleControlPlane, owner: &configOwner{pool: pool},
			wantReason: bootstrapv1.InvalidConfigurationReason, wantMessage: []string{"MachinePools cannot run control-plane nodes"}},
		{name: "version from the Machine", owner: &configOwner{machine: newMachine("m", "v1.31.2")},
			wantVersion: "v1.31.2", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
		{name: "version from the spec", specVersion: "v1.32.0", owner: &configOwner{machine: newMachine("m", "")},
			wantVersion: "v1.32.0", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
		{name: "spec version with a build suffix matches the Machine", specVersion: "v1.31.2+k3s1", owner: &configOwner{machine: newMachine("m", "v1.31.2")},
			wantVersion: "v1.31.2+k3s1", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
		{name: "MachinePool worker", owner: &configOwner{pool: pool},
			wantVersion: "v1.31.2", wantEndpoint: "api.demo.example.com:6443", wantClusterNm: "demo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newCluster()
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			role := tc.role
			if role == "" {
				role = bootstrapv1.RoleWorker
			}
			config := newConfig("m", bootstrapv1.KairosConfigSpec{Role: role, KubernetesVersion: tc.specVersion, Image: tc.image})
			s := &scope{config: config, owner: tc.owner, cluster: cluster}
			res, err := (&Reconciler{}).reconcilePrerequisites(context.Background(), s)
			if err != nil || !res.IsZero() {
				t.Fatalf("reconcilePrerequisites = %+v, %v", res, err)
			}
			if s.waitReason != tc.wantReason {
				t.Fatalf("wait reason = %q (%s), want %q", s.waitReason, s.waitMessage, tc.wantReason)
			}
			if s.halted != (tc.wantReason != "") {
				t.Errorf("halted = %v", s.halted)
			}
			for _, m := range tc.wantMessage {
				if !strings.Contains(s.waitMessage, m) {
					t.Errorf("wait message %q does not contain %q", s.waitMessage, m)
				}
			}
			if tc.wantReason != "" {
				if s.inputs.KubernetesVersion != "" || s.inputs.ClusterName != "" {
					t.Errorf("inputs filled while waiting: %+v", s.inputs)
				}
				return
			}
			if s.inputs.KubernetesVersion != tc.wantVersion || s.inputs.ClusterName != tc.wantClusterNm {
				t.Errorf("inputs = %+v", s.inputs)
			}
			if got := fmt.Sprintf("%s:%d", s.inputs.Endpoint.Host, s.inputs.Endpoint.Port); got != tc.wantEndpoint {
				t.Errorf("endpoint = %s, want %s", got, tc.wantEndpoint)
			}
		})
	}
}

func TestUpdateStatus(t *testing.T) {
	t.Run("data", func(t *testing.T) {
		c := newConfig("m", bootstrapv1.KairosConfigSpec{})
		if err := updateStatus(&scope{config: c, dataSecretName: "m"}); err != nil {
			t.Fatal(err)
		}
		if c.Status.DataSecretName != "m" || !ptr.Deref(c.Status.Initialization.DataSecretCreated, false) {
			t.Errorf("status = %+v, want data secret m and created", c.Status)
		}
		assertCondition(t, c, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionTrue, bootstrapv1.DataSecretAvailableReason, "")
		assertCondition(t, c, bootstrapv1.ReadyCondition, metav1.ConditionTrue, bootstrapv1.ReadyReason, "")
	})
	t.Run("wait", func(t *testing.T) {
		c := newConfig("m", bootstrapv1.KairosConfigSpec{})
		s := &scope{config: c}
		s.wait(bootstrapv1.WaitingForInitLockReason, "Machine %s is initializing", "m0")
		if err := updateStatus(s); err != nil {
			t.Fatal(err)
		}
		if c.Status.DataSecretName != "" || c.Status.Initialization.DataSecretCreated != nil {
			t.Errorf("status = %+v, want no data", c.Status)
		}
		assertCondition(t, c, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionFalse, bootstrapv1.WaitingForInitLockReason, "Machine m0 is initializing")
		assertCondition(t, c, bootstrapv1.ReadyCondition, metav1.ConditionFalse, bootstrapv1.NotReadyReason, "Machine m0 is initializing")
	})
	t.Run("wait after data keeps the data", func(t *testing.T) {
		// A wait recorded while data exists (for example a deleted Secret) must not unset the
		// contract fields Cluster API already acted on.
		c := newConfig("m", bootstrapv1.KairosConfigSpec{})
		c.Status.DataSecretName = "m"
		c.Status.Initialization.DataSecretCreated = ptr.To(true)
		s := &scope{config: c}
		s.wait(bootstrapv1.DataSecretCreationFailedReason, "deleted")
		if err := updateStatus(s); err != nil {
			t.Fatal(err)
		}
		if c.Status.DataSecretName != "m" || !ptr.Deref(c.Status.Initialization.DataSecretCreated, false) {
			t.Errorf("status = %+v", c.Status)
		}
		assertCondition(t, c, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionFalse, bootstrapv1.DataSecretCreationFailedReason, "deleted")
	})
	t.Run("nothing observed", func(t *testing.T) {
		c := newConfig("m", bootstrapv1.KairosConfigSpec{})
		if err := updateStatus(&scope{config: c}); err != nil {
			t.Fatal(err)
		}
		if conditions.Has(c, bootstrapv1.DataSecretAvailableCondition) {
			t.Error("DataSecretAvailable set without an observation")
		}
		assertCondition(t, c, bootstrapv1.ReadyCondition, metav1.ConditionUnknown, bootstrapv1.ReadyUnknownReason, "")
	})
}

func assertCondition(t *testing.T, c *bootstrapv1.KairosConfig, typ string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	cond := conditions.Get(c, typ)
	if cond == nil {
		t.Fatalf("no %s condition in %+v", typ, c.Status.Conditions)
	}
	if cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, message) {
		t.Errorf("%s = %s/%s %q, want %s/%s containing %q", typ, cond.Status, cond.Reason, cond.Message, status, reason, message)
	}
}

// joinData renders what the reconciler stores for a k0s worker holding bootstrap token t.
func joinData(t *testing.T, bt token.BootstrapToken) []byte {
	t.Helper()
	objs := pkiObjects(t)
	ca := objs[0].(*corev1.Secret).Data[secret.TLSCrtDataName]
	jt, err := token.NewK0sJoinToken(token.K0sWorkerToken, "https://api.demo.example.com:6443", ca, bt)
	if err != nil {
		t.Fatal(err)
	}
	return []byte("#cloud-config\nstages:\n  boot:\n    - files:\n        - path: /etc/k0s/token\n          permissions: 384\n          content: " + jt + "\n")
}

func TestRefreshJoinToken(t *testing.T) {
	withNode := newMachine("joined", "v1.31.2")
	withNode.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-1"}
	pool := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "bootstrap-token-abcdef")
	bt := token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}

	tests := []struct {
		name        string
		owner       *configOwner
		annotated   bool
		data        []byte
		refreshErr  error
		createErr   error
		wantCalls   int
		wantCreate  bool
		wantRequeue time.Duration
		// wantCondition is the JoinTokenAvailable reason, "" for no condition.
		wantCondition string
		wantStatus    metav1.ConditionStatus
	}{
		{name: "node not joined yet", owner: &configOwner{machine: newMachine("m", "v1.31.2")}, annotated: true, wantCalls: 1, wantRequeue: 20 * time.Second,
			wantCondition: bootstrapv1.JoinTokenValidReason, wantStatus: metav1.ConditionTrue},
		{name: "node joined", owner: &configOwner{machine: withNode}, annotated: true},
		{name: "no generated token", owner: &configOwner{machine: newMachine("m", "v1.31.2")}},
		{name: "MachinePool always refreshes", owner: &configOwner{pool: pool}, annotated: true, wantCalls: 1, wantRequeue: 20 * time.Second,
			wantCondition: bootstrapv1.JoinTokenValidReason, wantStatus: metav1.ConditionTrue},
		{name: "token gone is re-created from the data", owner: &configOwner{pool: pool}, annotated: true, data: joinData(t, bt), refreshErr: notFound,
			wantCalls: 1, wantCreate: true, wantRequeue: 20 * time.Second, wantCondition: bootstrapv1.JoinTokenRecreatedReason, wantStatus: metav1.ConditionTrue},
		{name: "re-creating fails", owner: &configOwner{machine: newMachine("m", "v1.31.2")}, annotated: true, data: joinData(t, bt), refreshErr: notFound,
			createErr: errors.New("unreachable"), wantCalls: 1, wantCreate: true, wantRequeue: waitRequeue,
			wantCondition: bootstrapv1.JoinTokenUnavailableReason, wantStatus: metav1.ConditionFalse},
		{name: "token gone and the data holds another", owner: &configOwner{machine: newMachine("m", "v1.31.2")}, annotated: true,
			data: joinData(t, token.BootstrapToken{ID: "zzzzzz", Secret: "zzzzzzzzzzzzzzzz"}), refreshErr: notFound, wantCalls: 1,
			wantCondition: bootstrapv1.JoinTokenUnavailableReason, wantStatus: metav1.ConditionFalse},
		{name: "workload cluster unreachable", owner: &configOwner{machine: newMachine("m", "v1.31.2")}, annotated: true, refreshErr: errors.New("unreachable"),
			wantCalls: 1, wantRequeue: waitRequeue, wantCondition: bootstrapv1.JoinTokenUnavailableReason, wantStatus: metav1.ConditionFalse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tokens := &stubTokens{refreshErr: tc.refreshErr, createErr: tc.createErr}
			now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
			r := &Reconciler{Tokens: tokens, TokenTTL: time.Minute, Now: func() time.Time { return now }}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}, Data: map[string][]byte{"value": tc.data}}
			if tc.annotated {
				secret.Annotations = map[string]string{bootstrapv1.TokenIDAnnotation: "abcdef"}
			}
			s := &scope{config: newConfig("m", bootstrapv1.KairosConfigSpec{}), owner: tc.owner, cluster: newCluster()}
			res, err := r.refreshJoinToken(context.Background(), s, secret)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, tc.wantRequeue)
			}
			if len(tokens.refreshed) != tc.wantCalls {
				t.Fatalf("Refresh calls = %+v, want %d", tokens.refreshed, tc.wantCalls)
			}
			if tc.wantCalls == 1 {
				call := tokens.refreshed[0]
				if call.id != "abcdef" || call.cluster != (client.ObjectKey{Namespace: ns, Name: "demo"}) {
					t.Errorf("Refresh(%v, %s)", call.cluster, call.id)
				}
				if !call.expires.Equal(now.Add(time.Minute)) {
					t.Errorf("expires = %v, want now + TTL", call.expires)
				}
			}
			if got := len(tokens.created) == 1; got != tc.wantCreate {
				t.Fatalf("Create calls = %+v, want create %v", tokens.created, tc.wantCreate)
			}
			if tc.wantCreate && (tokens.created[0].token != bt || tokens.created[0].role != token.K0sWorkerToken || !tokens.created[0].expires.Equal(now.Add(time.Minute))) {
				t.Errorf("re-created %+v, want the data's token %+v for a worker, valid for the TTL", tokens.created[0], bt)
			}
			switch {
			case tc.wantCondition == "" && s.joinToken != nil:
				t.Errorf("JoinTokenAvailable = %+v, want none", s.joinToken)
			case tc.wantCondition != "" && (s.joinToken == nil || s.joinToken.Reason != tc.wantCondition || s.joinToken.Status != tc.wantStatus):
				t.Errorf("JoinTokenAvailable = %+v, want %s/%s", s.joinToken, tc.wantStatus, tc.wantCondition)
			}
		})
	}
}

// workloadTokens plays the workload cluster's bootstrap tokens, including the token cleaner
// of kube-controller-manager, which deletes tokens once they expired.
type workloadTokens struct {
	now    func() time.Time
	tokens map[string]workloadToken
	// writes counts the tokens created and refreshed.
	writes int
}

type workloadToken struct {
	token   token.BootstrapToken
	expires time.Time
}

func (w *workloadTokens) clean() {
	for id, t := range w.tokens {
		if !w.now().Before(t.expires) {
			delete(w.tokens, id)
		}
	}
}

func (w *workloadTokens) Create(_ context.Context, _ client.ObjectKey, t token.BootstrapToken, _ token.K0sTokenRole, expires time.Time) error {
	w.clean()
	if _, ok := w.tokens[t.ID]; ok {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, t.SecretName())
	}
	w.tokens[t.ID] = workloadToken{token: t, expires: expires}
	w.writes++
	return nil
}

func (w *workloadTokens) Ready(context.Context, client.ObjectKey) error { return nil }

func (w *workloadTokens) Refresh(_ context.Context, _ client.ObjectKey, id string, expires, keepAfter time.Time) (time.Time, error) {
	w.clean()
	t, ok := w.tokens[id]
	if !ok {
		return time.Time{}, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "bootstrap-token-"+id)
	}
	if t.expires.After(keepAfter) {
		return t.expires, nil
	}
	t.expires = expires
	w.tokens[id] = t
	w.writes++
	return expires, nil
}

// valid reports whether a node presenting t would be let in now.
func (w *workloadTokens) valid(t token.BootstrapToken) bool {
	w.clean()
	got, ok := w.tokens[t.ID]
	return ok && got.token == t
}

// TestMachinePoolDataJoinsAnHourLater: a MachinePool hands its write-once data to every node
// it adds. With the controller away for an hour (no refresh), the token expires and the
// workload cluster deletes it; the next reconcile must bring back the very token the data
// holds, so that a node added an hour later still joins.
func TestMachinePoolDataJoinsAnHourLater(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	pool := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", UID: "pool-uid"},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "demo", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.31.2"}}}}
	config := newConfig("m", bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker})
	config.OwnerReferences[0].Kind, config.OwnerReferences[0].UID = "MachinePool", pool.UID
	wl := &workloadTokens{now: clock, tokens: map[string]workloadToken{}}
	r := &Reconciler{Client: newClient(t, append(pkiObjects(t), cluster, pool, config)...), TokenTTL: 15 * time.Minute, Tokens: wl, Now: clock}
	r.APIReader = r.Client
	r.complete()

	_, config = reconcile(t, r, "m")
	data := &corev1.Secret{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, data); err != nil {
		t.Fatalf("no data: %+v", config.Status.Conditions)
	}
	bt, _, err := joinTokenOf(data.Data["value"], data.Annotations[bootstrapv1.TokenIDAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	if !wl.valid(bt) {
		t.Fatal("the data's token is not valid right after rendering")
	}

	now = now.Add(time.Hour)
	if wl.valid(bt) {
		t.Fatal("the token outlived its TTL: the test proves nothing")
	}
	res, config := reconcile(t, r, "m")
	if !wl.valid(bt) {
		t.Fatalf("a node added an hour later cannot join: %+v", config.Status.Conditions)
	}
	assertCondition(t, config, bootstrapv1.JoinTokenAvailableCondition, metav1.ConditionTrue, bootstrapv1.JoinTokenRecreatedReason, "re-created from the bootstrap data")
	if res.RequeueAfter != 5*time.Minute {
		t.Errorf("RequeueAfter = %v, want TTL/3 to keep the token alive", res.RequeueAfter)
	}
	after := &corev1.Secret{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, after); err != nil || string(after.Data["value"]) != string(data.Data["value"]) {
		t.Fatal("the write-once data changed")
	}

	// Refreshed on time, the token stays valid without being re-created.
	now = now.Add(5 * time.Minute)
	_, config = reconcile(t, r, "m")
	assertCondition(t, config, bootstrapv1.JoinTokenAvailableCondition, metav1.ConditionTrue, bootstrapv1.JoinTokenValidReason, "valid until")
	now = now.Add(14 * time.Minute)
	if !wl.valid(bt) {
		t.Fatal("the refresh did not extend the token")
	}
}

func TestSecretToConfigs(t *testing.T) {
	config := func(name, clusterName, watch string, created bool) *bootstrapv1.KairosConfig {
		c := newConfig(name, bootstrapv1.KairosConfigSpec{})
		c.Labels = map[string]string{clusterv1.ClusterNameLabel: clusterName}
		if watch != "" {
			c.Labels[clusterv1.WatchLabel] = watch
		}
		if created {
			c.Status.Initialization.DataSecretCreated = ptr.To(true)
		}
		return c
	}
	objs := []client.Object{
		config("waiting", "demo", "", false),
		config("done", "demo", "", true),
		config("watched-waiting", "demo", "team-x", false),
		config("watched-done", "demo", "team-x", true),
		config("other-cluster", "other", "", false),
	}
	controlledBy := func(kind, name string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: bootstrapv1.GroupVersion.String(), Kind: kind, Name: name, UID: "u", Controller: ptr.To(true)}}
		return s
	}
	labelled := func(cluster string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-ca", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}}}
	}
	inOtherNamespace := labelled("demo")
	inOtherNamespace.Namespace = "elsewhere"
	notController := labelled("demo")
	notController.OwnerReferences = []metav1.OwnerReference{{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KairosConfig", Name: "done", UID: "u"}}
	machineControlled := labelled("demo")
	machineControlled.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "x", UID: "u", Controller: ptr.To(true)}}

	tests := []struct {
		name   string
		filter string
		secret *corev1.Secret
		want   []string
	}{
		{"data Secret wakes its config even with data", "", controlledBy("KairosConfig", "done"), []string{"done"}},
		{"data Secret of a config outside the watch filter", "team-x", controlledBy("KairosConfig", "done"), nil},
		{"data Secret of a config inside the watch filter", "team-x", controlledBy("KairosConfig", "watched-done"), []string{"watched-done"}},
		{"data Secret of a deleted config", "", controlledBy("KairosConfig", "gone"), nil},
		{"cluster Secret wakes the configs still waiting", "", labelled("demo"), []string{"waiting", "watched-waiting"}},
		{"cluster Secret honours the watch filter", "team-x", labelled("demo"), []string{"watched-waiting"}},
		{"cluster Secret of another cluster", "", labelled("other"), []string{"other-cluster"}},
		{"cluster Secret of a cluster without configs", "", labelled("nobody"), nil},
		{"cluster Secret in another namespace", "", inOtherNamespace, nil},
		{"a non-controller owner reference is not a data Secret", "", notController, []string{"waiting", "watched-waiting"}},
		{"a Secret controlled by something else falls back to the label", "", machineControlled, []string{"waiting", "watched-waiting"}},
		{"unrelated Secret", "", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}, nil},
	}
	c := newClient(t, objs...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Client: c, WatchFilterValue: tc.filter}
			var got []string
			for _, req := range r.secretToConfigs(context.Background(), tc.secret) {
				if req.Namespace != tc.secret.Namespace {
					t.Errorf("request %v in another namespace", req)
				}
				got = append(got, req.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("secretToConfigs = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSecretEvents: a data Secret wakes its KairosConfig only when it is deleted (its creation
// and updates are the controller's own doing); cluster Secrets wake configs on every event.
func TestSecretEvents(t *testing.T) {
	data := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u"}},
			bootstrapv1.GroupVersion.WithKind("KairosConfig"))}}}
	cert := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo-ca", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}}}
	p := dataSecretDeletedOrOtherSecret{}
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   [3]bool // create, update, delete
	}{
		{"data Secret", data, [3]bool{false, false, true}},
		{"cluster certificate", cert, [3]bool{true, true, true}},
	} {
		got := [3]bool{
			p.Create(event.CreateEvent{Object: tc.secret}),
			p.Update(event.UpdateEvent{ObjectOld: tc.secret, ObjectNew: tc.secret}),
			p.Delete(event.DeleteEvent{Object: tc.secret}),
		}
		if got != tc.want {
			t.Errorf("%s: create/update/delete pass %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClusterToConfigs(t *testing.T) {
	other := newConfig("x", bootstrapv1.KairosConfigSpec{})
	other.Labels[clusterv1.ClusterNameLabel] = "other"
	c := newClient(t, newConfig("a", bootstrapv1.KairosConfigSpec{}), newConfig("b", bootstrapv1.KairosConfigSpec{}), other)
	r := &Reconciler{Client: c}
	var got []string
	for _, req := range r.clusterToConfigs(context.Background(), newCluster()) {
		got = append(got, req.Name)
	}
	if !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("clusterToConfigs = %v, want [a b]", got)
	}
}

func TestMachineAndPoolToConfig(t *testing.T) {
	m := newMachine("m", "v1.31.2")
	if got := machineToConfig(context.Background(), m); len(got) != 1 || got[0].NamespacedName != (client.ObjectKey{Namespace: ns, Name: "m"}) {
		t.Errorf("machineToConfig = %v", got)
	}
	other := newMachine("kubeadm", "v1.31.2")
	other.Spec.Bootstrap.ConfigRef.Kind = "KubeadmConfig"
	if got := machineToConfig(context.Background(), other); got != nil {
		t.Errorf("machineToConfig for another provider = %v", got)
	}
	otherGroup := newMachine("x", "v1.31.2")
	otherGroup.Spec.Bootstrap.ConfigRef.APIGroup = "example.com"
	if got := machineToConfig(context.Background(), otherGroup); got != nil {
		t.Errorf("machineToConfig for another group = %v", got)
	}
	noRef := newMachine("data", "v1.31.2")
	noRef.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{}
	if got := machineToConfig(context.Background(), noRef); got != nil {
		t.Errorf("machineToConfig without a config = %v", got)
	}
	if got := machineToConfig(context.Background(), newCluster()); got != nil {
		t.Errorf("machineToConfig(Cluster) = %v", got)
	}

	pool := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}
	pool.Spec.Template.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: "pool-config"}
	if got := machinePoolToConfig(context.Background(), pool); len(got) != 1 || got[0].Name != "pool-config" || got[0].Namespace != ns {
		t.Errorf("machinePoolToConfig = %v", got)
	}
	if got := machinePoolToConfig(context.Background(), m); got != nil {
		t.Errorf("machinePoolToConfig(Machine) = %v", got)
	}
}

func TestClusterChangedForBootstrap(t *testing.T) {
	p := clusterChangedForBootstrap{}
	tests := []struct {
		name   string
		mutate func(*clusterv1.Cluster)
		want   bool
	}{
		{"no change", func(*clusterv1.Cluster) {}, false},
		{"unrelated change", func(c *clusterv1.Cluster) { c.Labels = map[string]string{"a": "b"} }, false},
		{"paused", func(c *clusterv1.Cluster) { c.Spec.Paused = ptr.To(true) }, true},
		{"infrastructure", func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = ptr.To(false) }, true},
		{"control plane initialized", func(c *clusterv1.Cluster) { c.Status.Initialization.ControlPlaneInitialized = ptr.To(true) }, true},
		{"endpoint", func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Host = "other" }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oldC, newC := newCluster(), newCluster()
			tc.mutate(newC)
			if got := p.Update(event.UpdateEvent{ObjectOld: oldC, ObjectNew: newC}); got != tc.want {
				t.Fatalf("Update = %v, want %v", got, tc.want)
			}
		})
	}
	if p.Update(event.UpdateEvent{ObjectOld: newMachine("a", ""), ObjectNew: newMachine("a", "")}) {
		t.Error("Update passes non-Cluster objects")
	}
	if !p.Create(event.CreateEvent{}) || p.Delete(event.DeleteEvent{}) || p.Generic(event.GenericEvent{}) {
		t.Error("Create must pass, Delete and Generic must not")
	}
}

// TestDataSecret runs a control-plane and a worker through Reconcile and checks the data
// Secret Cluster API hands to the infrastructure provider.
func TestDataSecret(t *testing.T) {
	k3sOverride, err := token.FormatK3sToken(strings.Repeat("ab", 32), token.K3sAgentUser, "user-supplied")
	if err != nil {
		t.Fatal(err)
	}
	k3sTokens := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-k3s-token"}, Data: map[string][]byte{
		"value":       []byte("K10" + strings.Repeat("cd", 32) + "::server:the-server-password"),
		"agent-token": []byte("K10" + strings.Repeat("cd", 32) + "::node:the-agent-password"),
	}}
	k3s := bootstrapv1.DistributionK3s
	tests := []struct {
		name        string
		spec        bootstrapv1.KairosConfigSpec
		initialized bool
		pool        bool
		extra       []client.Object
		wantRole    token.K0sTokenRole // "" when no token is created
		wantInData  string
	}{
		{name: "k0s control plane (init)", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane}},
		{name: "k0s worker", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker}, initialized: true, wantRole: token.K0sWorkerToken},
		{name: "k0s control plane (join)", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane}, initialized: true, wantRole: token.K0sControllerToken},
		{name: "k0s MachinePool worker", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker}, initialized: true, pool: true, wantRole: token.K0sWorkerToken},
		{name: "k3s control plane (init)", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, Distribution: k3s}, wantInData: "--cluster-init"},
		{name: "k3s worker gets the agent token", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: k3s},
			initialized: true, extra: []client.Object{k3sTokens}, wantInData: "::node:the-agent-password"},
		{name: "k3s worker with a token override", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: k3s, WorkerToken: k3sOverride},
			initialized: true, wantInData: k3sOverride},
		{name: "k3s worker with a token from a Secret", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: k3s,
			WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok"}}, initialized: true,
			extra:      []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, Data: map[string][]byte{"value": []byte(k3sOverride)}}},
			wantInData: k3sOverride},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newCluster()
			cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(tc.initialized)
			config := newConfig("m", tc.spec)
			var owner client.Object = newMachine("m", "v1.31.2")
			if tc.pool {
				pool := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", UID: "pool-uid"},
					Spec: clusterv1.MachinePoolSpec{ClusterName: "demo", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.31.2"}}}}
				config.OwnerReferences[0].Kind, config.OwnerReferences[0].UID = "MachinePool", pool.UID
				owner = pool
			}
			objs := append(pkiObjects(t), cluster, owner, config)
			objs = append(objs, tc.extra...)
			tokens := &stubTokens{}
			r := &Reconciler{Client: newClient(t, objs...), TokenTTL: 9 * time.Minute, Tokens: tokens}
			r.APIReader = r.Client
			r.complete()

			res, config := reconcile(t, r, "m")

			s := &corev1.Secret{}
			if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, s); err != nil {
				t.Fatalf("no data Secret: %v (conditions %+v)", err, config.Status.Conditions)
			}
			if s.Type != "cluster.x-k8s.io/secret" {
				t.Errorf("type = %q", s.Type)
			}
			if s.Labels[clusterv1.ClusterNameLabel] != "demo" || len(s.Labels) != 1 {
				t.Errorf("labels = %v, want only the cluster-name label", s.Labels)
			}
			ctrlRef := metav1.GetControllerOf(s)
			if ctrlRef == nil || ctrlRef.Kind != "KairosConfig" || ctrlRef.Name != "m" || ctrlRef.UID != config.UID ||
				ctrlRef.APIVersion != bootstrapv1.GroupVersion.String() || !ptr.Deref(ctrlRef.BlockOwnerDeletion, false) {
				t.Errorf("controller reference = %+v, want the KairosConfig", ctrlRef)
			}
			if len(s.Data) != 1 || len(s.Data["value"]) == 0 {
				t.Errorf("data keys = %v, want exactly one key \"value\"", reflect.ValueOf(s.Data).MapKeys())
			}
			if !strings.HasPrefix(string(s.Data["value"]), "#cloud-config\n") {
				t.Errorf("value does not start with #cloud-config")
			}

			if config.Status.DataSecretName != "m" || !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
				t.Errorf("status = %+v", config.Status)
			}
			assertCondition(t, config, bootstrapv1.ReadyCondition, metav1.ConditionTrue, bootstrapv1.ReadyReason, "")
			if config.Status.ObservedGeneration != config.Generation {
				t.Errorf("observedGeneration = %d, generation %d", config.Status.ObservedGeneration, config.Generation)
			}

			if tc.wantInData != "" && !strings.Contains(string(s.Data["value"]), tc.wantInData) {
				t.Errorf("data does not contain %q", tc.wantInData)
			}
			if tc.spec.Distribution == k3s && tc.spec.Role == bootstrapv1.RoleControlPlane {
				// The first k3s server creates the cluster token, owned by its config.
				tok := &corev1.Secret{}
				if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "demo-k3s-token"}, tok); err != nil {
					t.Fatalf("no k3s token Secret: %v", err)
				}
				if !metav1.IsControlledBy(tok, config) || !strings.Contains(string(s.Data["value"]), string(tok.Data["value"])) {
					t.Errorf("k3s token Secret %+v is not the config's or not in the data", tok.ObjectMeta)
				}
				// Servers accept the agent token from agents.
				if len(tok.Data["agent-token"]) == 0 || !strings.Contains(string(s.Data["value"]), string(tok.Data["agent-token"])) ||
					!strings.Contains(string(s.Data["value"]), "--agent-token-file=") {
					t.Errorf("the server's data does not hand it the agent token")
				}
			}
			if tc.spec.Distribution == k3s && tc.spec.Role == bootstrapv1.RoleWorker && strings.Contains(string(s.Data["value"]), "::server:") {
				t.Errorf("a k3s agent's data holds a server token")
			}
			if tc.wantRole == "" {
				if len(tokens.created) != 0 || s.Annotations[bootstrapv1.TokenIDAnnotation] != "" {
					t.Errorf("a token was created for the init node: %+v %v", tokens.created, s.Annotations)
				}
				if res.RequeueAfter != 0 {
					t.Errorf("RequeueAfter = %v, want none", res.RequeueAfter)
				}
				return
			}
			if len(tokens.created) != 1 {
				t.Fatalf("Create calls = %+v, want 1", tokens.created)
			}
			call := tokens.created[0]
			if call.role != tc.wantRole || call.cluster != (client.ObjectKey{Namespace: ns, Name: "demo"}) {
				t.Errorf("Create(%v, %s)", call.cluster, call.role)
			}
			if s.Annotations[bootstrapv1.TokenIDAnnotation] != call.token.ID {
				t.Errorf("token annotation = %q, want the created token %q", s.Annotations[bootstrapv1.TokenIDAnnotation], call.token.ID)
			}
			if res.RequeueAfter != 3*time.Minute {
				t.Errorf("RequeueAfter = %v, want TTL/3 to keep the token alive", res.RequeueAfter)
			}
		})
	}
}

// TestK3sWorkerTokenSecretWithTrailingNewline: a k3s worker whose token Secret holds the token
// plus a newline (what `kubectl create secret generic tok
// --from-file=value=/var/lib/rancher/k3s/server/agent-token` stores), which admission accepts,
// gets its bootstrap data.
func TestK3sWorkerTokenSecretWithTrailingNewline(t *testing.T) {
	tok, err := token.FormatK3sToken(strings.Repeat("ab", 32), token.K3sAgentUser, "from-file")
	if err != nil {
		t.Fatal(err)
	}
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	spec := bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK3s,
		WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok"}}
	objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"), newConfig("m", spec),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, Data: map[string][]byte{"value": []byte(tok + "\n")}})
	r := NewOffline(newClient(t, objs...))
	_, config := reconcile(t, r, "m")
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &corev1.Secret{}); err != nil {
		t.Fatalf("no bootstrap data for a k3s worker whose token Secret ends with a newline: %+v", config.Status.Conditions)
	}
}

func TestDataIsWrittenOnce(t *testing.T) {
	cluster := newCluster()
	objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"), newConfig("m", bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane}))
	r := NewOffline(newClient(t, objs...))
	_, _ = reconcile(t, r, "m")
	first := &corev1.Secret{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, first); err != nil {
		t.Fatal(err)
	}

	// Change the spec and reconcile again: the data must not be rendered again.
	config := &bootstrapv1.KairosConfig{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, config); err != nil {
		t.Fatal(err)
	}
	config.Spec.PreCommands = []string{"echo changed"}
	if err := r.Client.Update(context.Background(), config); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(config)}); err != nil {
		t.Fatal(err)
	}
	second := &corev1.Secret{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, second); err != nil {
		t.Fatal(err)
	}
	if string(first.Data["value"]) != string(second.Data["value"]) {
		t.Fatal("the data Secret was rendered again")
	}
}

// snapshot is every Secret (name and resourceVersion) and the KairosConfig's resourceVersion.
func snapshot(t *testing.T, c client.Client, config string) map[string]string {
	t.Helper()
	out := map[string]string{}
	secrets := &corev1.SecretList{}
	if err := c.List(context.Background(), secrets); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out["Secret "+s.Namespace+"/"+s.Name] = s.ResourceVersion
	}
	kc := &bootstrapv1.KairosConfig{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: config}, kc); err != nil {
		t.Fatal(err)
	}
	out["KairosConfig"] = kc.ResourceVersion
	return out
}

// TestInPlaceChangesWriteNothing: Cluster API's in-place update writes the desired KairosConfig
// of a Machine (here a new spec.image) while the update extension upgrades the node; the
// bootstrap controller ignores the change (bootstrap-config contract, "support for in-place
// changes"): no Secret is written or created (no data, no token), and the KairosConfig's status
// does not move.
func TestInPlaceChangesWriteNothing(t *testing.T) {
	const (
		oldImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.31.2-k0s.0"
		newImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k0sv1.31.2-k0s.0"
	)
	for _, annotated := range []bool{false, true} {
		t.Run(fmt.Sprintf("update-in-progress annotation %v", annotated), func(t *testing.T) {
			cluster := newCluster()
			objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"),
				newConfig("m", bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, Image: oldImage}))
			r := NewOffline(newClient(t, objs...))
			_, _ = reconcile(t, r, "m")
			_, _ = reconcile(t, r, "m")
			before := snapshot(t, r.Client, "m")
			if _, ok := before["Secret "+ns+"/m"]; !ok {
				t.Fatalf("no data Secret: %v", before)
			}
			data := &corev1.Secret{}
			if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, data); err != nil {
				t.Fatal(err)
			}

			config := &bootstrapv1.KairosConfig{}
			if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, config); err != nil {
				t.Fatal(err)
			}
			config.Spec.Image = newImage
			if annotated {
				config.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
			}
			if err := r.Client.Update(context.Background(), config); err != nil {
				t.Fatal(err)
			}
			before = snapshot(t, r.Client, "m")
			for range 2 {
				if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(config)}); err != nil {
					t.Fatal(err)
				}
			}
			if after := snapshot(t, r.Client, "m"); !reflect.DeepEqual(before, after) {
				t.Fatalf("the controller wrote after an in-place change:\nbefore %v\nafter  %v", before, after)
			}
			again := &corev1.Secret{}
			if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, again); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(again.Data["value"]), oldImage) || strings.Contains(string(again.Data["value"]), newImage) {
				t.Fatal("the data Secret does not hold the image the node was created with")
			}
		})
	}
}

// TestUpdateInProgressIsLeftAlone: a KairosConfig carrying Cluster API's update-in-progress
// annotation is not reconciled at all, whatever its state.
func TestUpdateInProgressIsLeftAlone(t *testing.T) {
	cluster := newCluster()
	cfg := newConfig("m", bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane})
	cfg.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
	objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"), cfg)
	r := NewOffline(newClient(t, objs...))
	before := snapshot(t, r.Client, "m")
	_, _ = reconcile(t, r, "m")
	if after := snapshot(t, r.Client, "m"); !reflect.DeepEqual(before, after) {
		t.Fatalf("the controller wrote for an annotated KairosConfig:\nbefore %v\nafter  %v", before, after)
	}
}

func TestReconcileExistingData(t *testing.T) {
	cfg := newConfig("m", bootstrapv1.KairosConfigSpec{})
	t.Run("adopts an orphaned data Secret", func(t *testing.T) {
		orphan := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
		r := NewOffline(newClient(t, orphan))
		s := &scope{config: cfg.DeepCopy(), owner: &configOwner{machine: newMachine("m", "")}, cluster: newCluster()}
		if _, err := r.reconcileExistingData(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.dataSecretName != "m" || !s.halted || s.waitReason != "" {
			t.Fatalf("scope = %+v", s)
		}
		got := &corev1.Secret{}
		if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(orphan), got); err != nil {
			t.Fatal(err)
		}
		if !metav1.IsControlledBy(got, cfg) {
			t.Fatalf("owner references = %+v, want the KairosConfig as controller", got.OwnerReferences)
		}
	})
	t.Run("refuses a Secret controlled by another object", func(t *testing.T) {
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x", Controller: ptr.To(true)}}}}
		r := NewOffline(newClient(t, foreign))
		s := &scope{config: cfg.DeepCopy(), owner: &configOwner{machine: newMachine("m", "")}, cluster: newCluster()}
		_, err := r.reconcileExistingData(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), "controlled by ConfigMap x") {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("trusts the Machine's dataSecretName", func(t *testing.T) {
		m := newMachine("m", "")
		m.Spec.Bootstrap.DataSecretName = ptr.To("restored")
		r := NewOffline(newClient(t))
		s := &scope{config: cfg.DeepCopy(), owner: &configOwner{machine: m}, cluster: newCluster()}
		if _, err := r.reconcileExistingData(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.dataSecretName != "restored" || !s.halted {
			t.Fatalf("scope = %+v", s)
		}
	})
	t.Run("deleted data is not rendered again", func(t *testing.T) {
		c := cfg.DeepCopy()
		c.Status.Initialization.DataSecretCreated = ptr.To(true)
		r := NewOffline(newClient(t))
		s := &scope{config: c, owner: &configOwner{machine: newMachine("m", "")}, cluster: newCluster()}
		if _, err := r.reconcileExistingData(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.waitReason != bootstrapv1.DataSecretCreationFailedReason || !s.halted || !strings.Contains(s.waitMessage, "delete the Machine to replace the node") {
			t.Fatalf("scope = %+v", s)
		}
	})
	t.Run("no data yet", func(t *testing.T) {
		r := NewOffline(newClient(t))
		s := &scope{config: cfg.DeepCopy(), owner: &configOwner{machine: newMachine("m", "")}, cluster: newCluster()}
		if _, err := r.reconcileExistingData(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.halted || s.dataSecretName != "" {
			t.Fatalf("scope = %+v", s)
		}
	})
}

func TestReconcileWaits(t *testing.T) {
	tests := []struct {
		name       string
		spec       bootstrapv1.KairosConfigSpec
		cluster    func(*clusterv1.Cluster)
		extra      []client.Object
		noPKI      bool
		stored     bool // the data Secret is stored, though not handed out
		tokens     *stubTokens
		wantReason string
		wantMsg    string
	}{
		{name: "worker before the control plane", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker},
			wantReason: bootstrapv1.WaitingForControlPlaneInitializedReason, wantMsg: "control plane of Cluster demo"},
		{name: "second init node", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane},
			extra: []client.Object{newMachine("first", "v1.31.2"), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-kairos-init-lock"}, Data: map[string]string{"machine": "first"}}},
			wantReason: bootstrapv1.WaitingForInitLockReason, wantMsg: "Machine first is initializing Cluster demo"},
		{name: "joining control plane without certificates", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane},
			cluster: initialized, noPKI: true, wantReason: bootstrapv1.WaitingForClusterCertificatesReason, wantMsg: "demo-ca"},
		{name: "k0s worker without the CA", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker},
			cluster: initialized, noPKI: true, wantReason: bootstrapv1.WaitingForClusterCertificatesReason, wantMsg: "demo-ca"},
		{name: "k3s worker without the cluster token", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK3s},
			cluster: initialized, wantReason: bootstrapv1.WaitingForJoinTokenReason, wantMsg: "demo-k3s-token"},
		// The data is stored first (see reconcileDataSecret), but not handed out before its token
		// exists.
		{name: "workload cluster unreachable", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker},
			cluster: initialized, tokens: &stubTokens{createErr: errors.New("connection refused"), refreshErr: errors.New("connection refused")},
			stored:     true,
			wantReason: bootstrapv1.WaitingForJoinTokenReason, wantMsg: "in the workload cluster, retrying: connection refused"},
		{name: "referenced Secret missing", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane,
			Files: []bootstrapv1.File{{Path: "/etc/x", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "user-files"}}}},
			wantReason: bootstrapv1.WaitingForReferencedSecretReason, wantMsg: "Secret user-files referenced by the spec does not exist"},
		{name: "fragment conflicting with the document", spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, Hostname: "a",
			CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "f", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "frag"}}}},
			extra:      []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "frag"}, Data: map[string][]byte{"value": []byte("hostname: b\n")}}},
			wantReason: bootstrapv1.InvalidConfigurationReason, wantMsg: `cannot render the bootstrap data`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newCluster()
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			objs := append([]client.Object{cluster, newMachine("m", "v1.31.2"), newConfig("m", tc.spec)}, tc.extra...)
			if !tc.noPKI {
				objs = append(objs, pkiObjects(t)...)
			}
			tokens := tc.tokens
			if tokens == nil {
				tokens = &stubTokens{}
			}
			c := newClient(t, objs...)
			r := &Reconciler{Client: c, APIReader: c, Tokens: tokens}
			r.complete()
			_, config := reconcile(t, r, "m")
			if config.Status.DataSecretName != "" || config.Status.Initialization.DataSecretCreated != nil {
				t.Fatalf("data created: %+v", config.Status)
			}
			assertCondition(t, config, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionFalse, tc.wantReason, tc.wantMsg)
			assertCondition(t, config, bootstrapv1.ReadyCondition, metav1.ConditionFalse, bootstrapv1.NotReadyReason, "")
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &corev1.Secret{}); tc.stored != (err == nil) || err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("data Secret stored = %v, want %v", err == nil, tc.stored)
			}
		})
	}
}

func initialized(c *clusterv1.Cluster) {
	c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
}

func TestReconcileWithoutOwnerOrCluster(t *testing.T) {
	noOwner := newConfig("m", bootstrapv1.KairosConfigSpec{})
	noOwner.OwnerReferences = nil
	r := NewOffline(newClient(t, noOwner, newCluster()))
	if res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(noOwner)}); err != nil || !res.IsZero() {
		t.Fatalf("without an owner: %+v, %v", res, err)
	}

	r = NewOffline(newClient(t, newConfig("m", bootstrapv1.KairosConfigSpec{}), newMachine("m", "v1.31.2")))
	if res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}}); err != nil || !res.IsZero() {
		t.Fatalf("without a Cluster: %+v, %v", res, err)
	}

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "absent"}}); err != nil {
		t.Fatalf("a deleted config: %v", err)
	}
}

func TestNewOfflineDefaults(t *testing.T) {
	r := NewOffline(newClient(t))
	if r.TokenTTL != DefaultTokenTTL || r.Tokens == nil || r.initLock == nil || r.APIReader == nil {
		t.Fatalf("NewOffline = %+v", r)
	}
	if r.tokenRefreshInterval() != DefaultTokenTTL/3 {
		t.Errorf("refresh interval = %v", r.tokenRefreshInterval())
	}
	if err := r.Tokens.Create(context.Background(), client.ObjectKey{}, token.BootstrapToken{}, token.K0sWorkerToken, time.Now()); err != nil {
		t.Errorf("offline Create: %v", err)
	}
	if _, err := r.Tokens.Refresh(context.Background(), client.ObjectKey{}, "id", time.Now(), time.Now()); err != nil {
		t.Errorf("offline Refresh: %v", err)
	}
}

func TestBootstrapTokenSecret(t *testing.T) {
	tok := token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := bootstrapTokenSecret(tok, token.K0sWorkerToken, expires)
	if err != nil {
		t.Fatal(err)
	}
	if s.Namespace != "kube-system" || s.Name != "bootstrap-token-abcdef" || s.Type != corev1.SecretTypeBootstrapToken {
		t.Errorf("secret = %s/%s %s", s.Namespace, s.Name, s.Type)
	}
	if s.StringData["token-id"] != "abcdef" || s.StringData["token-secret"] != "0123456789abcdef" || s.StringData["expiration"] != "2030-01-02T03:04:05Z" {
		t.Errorf("data = %v", s.StringData)
	}
	if bootstrapTokenSecretName("abcdef") != "bootstrap-token-abcdef" {
		t.Errorf("bootstrapTokenSecretName = %q", bootstrapTokenSecretName("abcdef"))
	}
	if _, err := bootstrapTokenSecret(token.BootstrapToken{ID: "BAD"}, token.K0sWorkerToken, expires); err == nil {
		t.Error("an invalid token was accepted")
	}
}

// TestNoTokenWithoutData: a join token is registered in the workload cluster only once the
// document rendered; before, a render that failed (or an endpoint no URL can be built from) left
// a fresh orphan token behind on every reconcile.
func TestNoTokenWithoutData(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    bootstrapv1.KairosConfigSpec
		cluster func(*clusterv1.Cluster)
		extra   []client.Object
		want    string
	}{
		{name: "fragment from a Secret a node would misread",
			spec: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, CloudConfigFragments: []bootstrapv1.CloudConfigFragment{
				{Name: "site", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "frag"}}}},
			extra: []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "frag"},
				Data: map[string][]byte{"value": []byte("p2p:\n  network_token: x\n")}}},
			want: `spec.cloudConfigFragments[0].contentFrom (fragment "site", Secret frag key value): p2p: may not be set by a fragment`},
		{name: "endpoint host no URL can be built from",
			spec:    bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker},
			cluster: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Host = "bad host" },
			want:    `Cluster demo spec.controlPlaneEndpoint.host: "bad host" is neither an IP address nor a DNS name`},
		{name: "a Cluster network k0s cannot run",
			spec:    bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane},
			cluster: func(c *clusterv1.Cluster) { c.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"10.0.0.0/40"} },
			want:    `Cluster spec.clusterNetwork.pods.cidrBlocks[0]: "10.0.0.0/40" is not a CIDR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newCluster()
			cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"), newConfig("m", tc.spec))
			tokens := &stubTokens{}
			r := &Reconciler{Client: newClient(t, append(objs, tc.extra...)...), TokenTTL: time.Minute, Tokens: tokens}
			r.APIReader = r.Client
			r.complete()
			_, config := reconcile(t, r, "m")
			if ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
				t.Fatal("rendered")
			}
			assertCondition(t, config, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionFalse, bootstrapv1.InvalidConfigurationReason, tc.want)
			if len(tokens.created) != 0 {
				t.Errorf("tokens created without data: %+v", tokens.created)
			}
		})
	}
}

// TestStoredDataWaitsForItsToken: data stored by a manager that stopped before it registered
// the data's join token (or could not reach the workload cluster) is handed out only once the
// token exists, re-created with the ID and secret the data holds: no second token, no data a
// node cannot join with.
func TestStoredDataWaitsForItsToken(t *testing.T) {
	bt := token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	initialized := func(c *clusterv1.Cluster) { c.Status.Initialization.ControlPlaneInitialized = ptr.To(true) }
	for _, tc := range []struct {
		name       string
		createErr  error
		wantStored bool
	}{
		{name: "token registered from the data"},
		{name: "workload cluster still unreachable", createErr: errors.New("connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newCluster()
			initialized(cluster)
			config := newConfig("m", bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker})
			stored := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Annotations: map[string]string{bootstrapv1.TokenIDAnnotation: bt.ID}},
				Data:       map[string][]byte{"value": joinData(t, bt)},
			}
			objs := append([]client.Object{cluster, newMachine("m", "v1.31.2"), config, stored}, pkiObjects(t)...)
			c := newClient(t, objs...)
			tokens := &stubTokens{refreshErr: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "bootstrap-token-"+bt.ID), createErr: tc.createErr}
			r := &Reconciler{Client: c, APIReader: c, Tokens: tokens}
			r.complete()
			_, got := reconcile(t, r, "m")
			for _, c := range tokens.created {
				if c.token != bt {
					t.Errorf("created token %s, not the data's %s", c.token.ID, bt.ID)
				}
			}
			if len(tokens.created) == 0 {
				t.Fatalf("tokens created %+v, want exactly the data's %s; status %+v", tokens.created, bt.ID, got.Status)
			}
			handedOut := got.Status.DataSecretName != ""
			if want := tc.createErr == nil; handedOut != want {
				t.Fatalf("data handed out = %v, want %v (status %+v)", handedOut, want, got.Status)
			}
			if tc.createErr != nil {
				assertCondition(t, got, bootstrapv1.DataSecretAvailableCondition, metav1.ConditionFalse, bootstrapv1.WaitingForJoinTokenReason, "connection refused")
			} else {
				assertCondition(t, got, bootstrapv1.JoinTokenAvailableCondition, metav1.ConditionTrue, bootstrapv1.JoinTokenRecreatedReason, bt.ID)
			}
		})
	}
}

// TestNewWorkerWritesTheFloor: a worker's config whose cluster is ready costs exactly what the
// bootstrap contract requires, in one reconcile: the data Secret, the workload join token and one
// status patch (Paused, data, conditions, observedGeneration together). The reconciles that
// follow (its own status event, a resync) write nothing.
func TestNewWorkerWritesTheFloor(t *testing.T) {
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	writes := map[string]int{}
	count := func(kind string) { writes[kind]++ }
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(append(pkiObjects(t), cluster, newMachine("w", "v1.31.2"), newConfig("w", bootstrapv1.KairosConfigSpec{}))...).
		WithStatusSubresource(&bootstrapv1.KairosConfig{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				count(fmt.Sprintf("create %T", obj))
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count(fmt.Sprintf("update %T", obj))
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				count(fmt.Sprintf("patch %T", obj))
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				count(fmt.Sprintf("delete %T", obj))
				return c.Delete(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				count(fmt.Sprintf("patch %T/%s", obj, sub))
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	tokens := &workloadTokens{now: time.Now, tokens: map[string]workloadToken{}}
	r := &Reconciler{Client: c, APIReader: c, TokenTTL: 15 * time.Minute, Tokens: tokens}
	r.complete()
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w"}}

	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"create *v1.Secret": 1, "patch *v1beta2.KairosConfig/status": 1}
	if !reflect.DeepEqual(writes, want) || tokens.writes != 1 {
		t.Errorf("first reconcile wrote %v and %d workload tokens, want %v and 1", writes, tokens.writes, want)
	}
	config := &bootstrapv1.KairosConfig{}
	if err := c.Get(context.Background(), req.NamespacedName, config); err != nil {
		t.Fatal(err)
	}
	if config.Status.DataSecretName != "w" || !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) || config.Status.ObservedGeneration != config.Generation {
		t.Errorf("status after one reconcile: %+v", config.Status)
	}
	for _, typ := range []string{clusterv1.PausedCondition, bootstrapv1.DataSecretAvailableCondition, bootstrapv1.ReadyCondition, bootstrapv1.JoinTokenAvailableCondition} {
		if conditions.Get(config, typ) == nil {
			t.Errorf("condition %s missing after one reconcile", typ)
		}
	}

	clear(writes)
	for range 2 {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if len(writes) != 0 || tokens.writes != 1 {
		t.Errorf("later reconciles wrote %v and %d more workload tokens, want nothing", writes, tokens.writes-1)
	}
}

// TestNotConnectedWritesNothing: before the ClusterCache tried to connect to the workload cluster
// (a manager that just started), a worker's config gets no data, no token and no status write;
// it comes back soon, and as soon as the connection event asks: it gives back its slot of Cluster
// API's per-object rate limit (a deferral to the zero time). Once a connection was tried and
// failed, it says it waits for its token.
func TestNotConnectedWritesNothing(t *testing.T) {
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	c := newClient(t, append(pkiObjects(t), cluster, newMachine("w", "v1.31.2"), newConfig("w", bootstrapv1.KairosConfigSpec{}))...)
	tokens := &stubTokens{readyErr: errConnecting}
	fake := capicontrollerutil.NewFakeController()
	r := &Reconciler{Client: c, APIReader: c, TokenTTL: 15 * time.Minute, Tokens: tokens, controller: fake}
	r.complete()
	before := &bootstrapv1.KairosConfig{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w"}, before); err != nil {
		t.Fatal(err)
	}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w"}})
	if err != nil || res.RequeueAfter != notConnectedRequeue {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after %s", res, err, notConnectedRequeue)
	}
	after := &bootstrapv1.KairosConfig{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w"}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || len(tokens.created) != 0 {
		t.Errorf("config written (resourceVersion %s -> %s) or %d tokens created", before.ResourceVersion, after.ResourceVersion, len(tokens.created))
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("data Secret: %v, want none", err)
	}
	if at, ok := fake.Deferrals[ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w"}}]; !ok || !at.IsZero() {
		t.Errorf("next reconcile deferred to %v (recorded: %t), want the zero time: no wait once connected", at, ok)
	}
}

// TestProblemEvents: a config that cannot render gets a Warning event with the condition's
// reason and message, once per distinct problem.
func TestProblemEvents(t *testing.T) {
	cluster := newCluster()
	cluster.Spec.ControlPlaneEndpoint.Host = "not a host name"
	c := newClient(t, append(pkiObjects(t), cluster, newMachine("w", "v1.31.2"), newConfig("w", bootstrapv1.KairosConfigSpec{}))...)
	recorder := record.NewFakeRecorder(10)
	r := &Reconciler{Client: c, APIReader: c, Tokens: &stubTokens{}, Recorder: recorder}
	r.complete()
	for range 3 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+bootstrapv1.InvalidConfigurationReason+" Cluster demo spec.controlPlaneEndpoint.host") {
		t.Errorf("events %q, want one Warning %s naming the field", got, bootstrapv1.InvalidConfigurationReason)
	}
}

func TestNotConnectedSaysSo(t *testing.T) {
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	c := newClient(t, append(pkiObjects(t), cluster, newMachine("w", "v1.31.2"), newConfig("w", bootstrapv1.KairosConfigSpec{}))...)
	tokens := &stubTokens{readyErr: clustercache.ErrClusterNotConnected}
	r := &Reconciler{Client: c, APIReader: c, TokenTTL: 15 * time.Minute, Tokens: tokens}
	r.complete()
	_, config := reconcile(t, r, "w")
	cond := conditions.Get(config, bootstrapv1.DataSecretAvailableCondition)
	if cond == nil || cond.Reason != bootstrapv1.WaitingForJoinTokenReason || !strings.Contains(cond.Message, "cannot reach the workload cluster") {
		t.Errorf("DataSecretAvailable = %+v, want WaitingForJoinToken saying the workload cluster cannot be reached", cond)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("data Secret: %v, want none before its token can be registered", err)
	}
}
