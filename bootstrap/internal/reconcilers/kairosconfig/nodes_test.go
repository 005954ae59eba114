package kairosconfig

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// fakeNodes is a workload cluster's Nodes by name and provider ID; like the API server, it
// never changes a provider ID once set.
type fakeNodes struct {
	providerIDs map[string]string
	err         error
	calls       []string
}

func (f *fakeNodes) SetProviderID(_ context.Context, _ client.ObjectKey, name, id string) (string, error) {
	f.calls = append(f.calls, name)
	if f.err != nil {
		return "", f.err
	}
	got, ok := f.providerIDs[name]
	if !ok {
		return "", apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	if got == "" {
		f.providerIDs[name] = id
		return id, nil
	}
	return got, nil
}

func TestReconcileNodeProviderID(t *testing.T) {
	const id = "vsphere://4213a9e4-5b3c-4e1f-9d2a-0f1e2d3c4b5a"
	machine := func(mutate func(*clusterv1.Machine)) *configOwner {
		m := newMachine("md-0-abcde", "v1.31.2")
		m.Spec.ProviderID = id
		if mutate != nil {
			mutate(m)
		}
		return &configOwner{machine: m}
	}
	distribution := bootstrapv1.KairosConfigSpec{ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromDistribution}}
	tests := []struct {
		name        string
		spec        bootstrapv1.KairosConfigSpec
		owner       *configOwner
		nodes       map[string]string
		err         error
		wantNode    string // the Node the controller asks for; "" for no call
		wantReason  string // "" for no condition
		wantMessage string
		wantRequeue time.Duration
		wantID      string // the Node's provider ID afterwards
	}{
		{name: "Node registered without one gets the Machine's", owner: machine(nil), nodes: map[string]string{"md-0-abcde": ""},
			wantNode: "md-0-abcde", wantReason: bootstrapv1.NodeProviderIDSetReason, wantID: id},
		{name: "hostname names the Node", spec: bootstrapv1.KairosConfigSpec{Hostname: "edge-1"}, owner: machine(nil), nodes: map[string]string{"edge-1": ""},
			wantNode: "edge-1", wantReason: bootstrapv1.NodeProviderIDSetReason, wantID: id},
		{name: "already set is left alone", owner: machine(nil), nodes: map[string]string{"md-0-abcde": id},
			wantNode: "md-0-abcde", wantReason: bootstrapv1.NodeProviderIDSetReason, wantID: id},
		{name: "Machine without a provider ID yet", owner: machine(func(m *clusterv1.Machine) { m.Spec.ProviderID = "" }), nodes: map[string]string{"md-0-abcde": ""},
			wantReason: bootstrapv1.WaitingForMachineProviderIDReason, wantMessage: "spec.providerID", wantID: ""},
		{name: "Node not registered yet", owner: machine(nil), nodes: map[string]string{},
			wantNode: "md-0-abcde", wantReason: bootstrapv1.WaitingForNodeReason, wantMessage: "Node md-0-abcde to register", wantRequeue: waitRequeue},
		{name: "workload cluster unreachable", owner: machine(nil), err: errors.New("connection refused"),
			wantNode: "md-0-abcde", wantReason: bootstrapv1.WaitingForNodeReason, wantMessage: "connection refused", wantRequeue: waitRequeue},
		{name: "Node claimed by another provider ID", owner: machine(nil), nodes: map[string]string{"md-0-abcde": "k3s://md-0-abcde"},
			wantNode: "md-0-abcde", wantReason: bootstrapv1.NodeProviderIDConflictReason, wantMessage: "registered with provider ID k3s://md-0-abcde", wantRequeue: waitRequeue,
			wantID: "k3s://md-0-abcde"},
		{name: "linked Machine: nothing is read", owner: machine(func(m *clusterv1.Machine) { m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "md-0-abcde"} }),
			nodes: map[string]string{"md-0-abcde": id}, wantReason: bootstrapv1.NodeProviderIDSetReason, wantID: id},
		{name: "provider ID from the distribution", spec: distribution, owner: machine(nil), nodes: map[string]string{"md-0-abcde": ""}, wantID: ""},
		{name: "MachinePool", owner: &configOwner{pool: &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}}, nodes: map[string]string{"pool": ""}, wantID: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := &fakeNodes{providerIDs: tc.nodes, err: tc.err}
			r := &Reconciler{Nodes: nodes}
			s := &scope{config: newConfig("md-0-abcde", tc.spec), owner: tc.owner, cluster: newCluster()}
			res := r.reconcileNodeProviderID(context.Background(), s)
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, tc.wantRequeue)
			}
			switch {
			case tc.wantNode == "" && len(nodes.calls) > 0:
				t.Errorf("asked the workload cluster for %v, want no call", nodes.calls)
			case tc.wantNode != "" && (len(nodes.calls) != 1 || nodes.calls[0] != tc.wantNode):
				t.Errorf("asked for Nodes %v, want %s", nodes.calls, tc.wantNode)
			}
			for name, got := range nodes.providerIDs {
				if name == tc.wantNode && got != tc.wantID {
					t.Errorf("Node %s has provider ID %q, want %q", name, got, tc.wantID)
				}
			}
			if tc.wantReason == "" {
				if s.nodeProviderID != nil {
					t.Fatalf("condition %+v, want none", s.nodeProviderID)
				}
				return
			}
			c := s.nodeProviderID
			if c == nil || c.Reason != tc.wantReason || !strings.Contains(c.Message, tc.wantMessage) {
				t.Fatalf("condition %+v, want reason %s with %q", c, tc.wantReason, tc.wantMessage)
			}
			if want := map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[tc.wantReason == bootstrapv1.NodeProviderIDSetReason]; c.Status != want {
				t.Errorf("status %s, want %s", c.Status, want)
			}
		})
	}
}

// TestNotConnectedKeepsConditions: a manager that has just started reaches workload clusters
// only once the ClusterCache connected; until then the join-token and provider-ID conditions
// stay as they were, so that a restart does not flip them (two writes per config) for nothing.
func TestNotConnectedKeepsConditions(t *testing.T) {
	m := newMachine("md-0-abcde", "v1.31.2")
	m.Spec.ProviderID = "kubevirt://md-0-abcde"
	config := newConfig("md-0-abcde", bootstrapv1.KairosConfigSpec{})
	kept := []metav1.Condition{
		{Type: bootstrapv1.JoinTokenAvailableCondition, Status: metav1.ConditionTrue, Reason: bootstrapv1.JoinTokenValidReason, Message: "valid until later"},
		{Type: bootstrapv1.NodeProviderIDCondition, Status: metav1.ConditionFalse, Reason: bootstrapv1.WaitingForNodeReason, Message: "waiting for Node md-0-abcde"},
	}
	config.Status.Conditions = kept
	r := &Reconciler{
		Tokens: &stubTokens{refreshErr: clustercache.ErrClusterNotConnected}, TokenTTL: time.Minute, Now: time.Now,
		Nodes: &fakeNodes{err: clustercache.ErrClusterNotConnected},
	}
	s := &scope{config: config, owner: &configOwner{machine: m}, cluster: newCluster()}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "md-0-abcde", Annotations: map[string]string{bootstrapv1.TokenIDAnnotation: "abcdef"}}}
	res, err := r.refreshJoinToken(context.Background(), s, secret)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != notConnectedRequeue {
		t.Errorf("refresh: RequeueAfter %v, want %v", res.RequeueAfter, notConnectedRequeue)
	}
	if res := r.reconcileNodeProviderID(context.Background(), s); res.RequeueAfter != notConnectedRequeue {
		t.Errorf("provider ID: RequeueAfter %v, want %v", res.RequeueAfter, notConnectedRequeue)
	}
	if err := updateStatus(s); err != nil {
		t.Fatal(err)
	}
	for _, want := range kept {
		got := conditions.Get(s.config, want.Type)
		if got == nil || got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message {
			t.Errorf("condition %s = %+v, want it kept as %+v", want.Type, got, want)
		}
	}
}
