package simnode_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

const version = "v1.36.3"

// world is one simulated cluster driven without Cluster API: the test renders the documents
// the bootstrap provider would.
type world struct {
	t        *testing.T
	ctx      context.Context
	reg      *simnode.Registry
	dist     render.Distribution
	endpoint render.Endpoint
	pki      *render.PKI
	k3sToken string
	// k3sAgentToken is the cluster's agent token: servers get it as AgentToken, agents as
	// JoinToken.
	k3sAgentToken string
}

// newRegistry starts a Registry of simulated nodes for one test.
func newRegistry(t *testing.T) *simnode.Registry {
	t.Helper()
	reg, err := simnode.NewRegistry(simnode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return reg
}

func newWorld(t *testing.T, reg *simnode.Registry, dist render.Distribution) *world {
	t.Helper()
	host, port, err := reg.ReserveEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ctx: framework.Context(t), reg: reg, dist: dist, endpoint: render.Endpoint{Host: host, Port: port}}
	w.pki = &render.PKI{}
	for _, kp := range []*pki.KeyPair{&w.pki.ClusterCA, &w.pki.EtcdCA, &w.pki.FrontProxyCA} {
		ca, err := pki.NewCA("sim-ca", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		*kp = *ca
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	w.pki.ServiceAccount = *sa
	if dist == render.K3s {
		if w.k3sToken, err = token.NewK3sToken(w.pki.ClusterCA.Cert); err != nil {
			t.Fatal(err)
		}
		if w.k3sAgentToken, err = token.NewK3sAgentToken(w.pki.ClusterCA.Cert); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { reg.StopCluster(w.endpointString()) })
	return w
}

func (w *world) endpointString() string {
	return net.JoinHostPort(w.endpoint.Host, strconv.Itoa(int(w.endpoint.Port)))
}

func (w *world) doc(n render.Node) []byte {
	w.t.Helper()
	n.Distribution, n.ClusterName, n.Endpoint = w.dist, "sim", w.endpoint
	if n.KubernetesVersion == "" {
		n.KubernetesVersion = version
	}
	n.Users = []render.User{{Name: "kairos", Password: "s3cret"}}
	if w.dist == render.K3s && n.Role == render.RoleControlPlane && n.AgentToken == "" {
		n.AgentToken = w.k3sAgentToken
	}
	data, err := render.Document(n)
	if err != nil {
		w.t.Fatal(err)
	}
	return data
}

func (w *world) start(name string, doc []byte, installed string) *simnode.Node {
	w.t.Helper()
	n, err := w.reg.StartNode(simnode.NodeSpec{Namespace: "test", Name: name, Endpoint: w.endpointString(), Data: doc, InstalledVersion: installed})
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

func waitPhase(t *testing.T, n *simnode.Node, phase simnode.Phase, reason string, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() error {
		s := n.Status()
		if s.Phase != phase || (reason != "" && s.Reason != reason) {
			return fmt.Errorf("%s, want %s/%s", n, phase, reason)
		}
		return nil
	})
}

// workerToken registers a bootstrap token in the workload cluster and returns the join
// credentials a worker gets.
func (w *world) workerToken(c *simnode.Cluster, role token.K0sTokenRole) string {
	w.t.Helper()
	if w.dist == render.K3s {
		if role == token.K0sControllerToken {
			return w.k3sToken
		}
		return w.k3sAgentToken
	}
	bt, err := token.NewBootstrapToken()
	if err != nil {
		w.t.Fatal(err)
	}
	data, err := token.K0sBootstrapTokenSecretData(role, bt, time.Now().Add(time.Hour))
	if err != nil {
		w.t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bt.SecretName()},
		Type:       corev1.SecretTypeBootstrapToken, StringData: data,
	}
	if err := c.AdminClient().Create(w.ctx, s); err != nil {
		w.t.Fatal(err)
	}
	server, err := token.K0sJoinURL(role, w.endpoint.Host, w.endpoint.Port)
	if err != nil {
		w.t.Fatal(err)
	}
	jt, err := token.NewK0sJoinToken(role, server, w.pki.ClusterCA.Cert, bt)
	if err != nil {
		w.t.Fatal(err)
	}
	return jt
}

func (w *world) wrongToken() string {
	w.t.Helper()
	if w.dist == render.K3s {
		hash, err := token.K3sCAHash(w.pki.ClusterCA.Cert)
		if err != nil {
			w.t.Fatal(err)
		}
		t, err := token.FormatK3sToken(hash, token.K3sAgentUser, "0123456789abcdef0123456789abcdef")
		if err != nil {
			w.t.Fatal(err)
		}
		return t
	}
	server, _ := token.K0sJoinURL(token.K0sWorkerToken, w.endpoint.Host, w.endpoint.Port)
	jt, err := token.NewK0sJoinToken(token.K0sWorkerToken, server, w.pki.ClusterCA.Cert, token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"})
	if err != nil {
		w.t.Fatal(err)
	}
	return jt
}

func node(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// distributionProviderID is the provider ID a node registers with when its document leaves it
// to the distribution: none with k0s, k3s://<node name> from k3s' embedded cloud controller;
// never the machine's infrastructure provider ID, which the node does not know.
func distributionProviderID(dist render.Distribution, name string) string {
	if dist == render.K3s {
		return "k3s://" + name
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// TestNodes drives simulated nodes directly: init, a joining control plane, a worker, a worker
// with a wrong token, a refused document, a preflight failure, an etcd leave, and an injected
// Ready=False.
func TestNodes(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)

	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			start := time.Now()
			w := newWorld(t, reg, dist)

			// Refused before anything starts: not a Kairos document; the wrong version.
			bad := w.start("garbage", []byte("users: [\n"), "")
			waitPhase(t, bad, simnode.PhaseRefused, simnode.ReasonBootstrapDataRefused, 30*time.Second)
			if msg := bad.Status().Message; !strings.Contains(msg, "kairos document has") {
				t.Fatalf("refusal message %q does not carry Check's report", msg)
			}
			initDoc := w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken,
				Hostname: "cp-0", Manifests: []render.Manifest{{Name: "ns", Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: from-manifest\n"}}})
			old := w.start("old-image", initDoc, "v1.30.1+"+string(dist)+"1")
			waitPhase(t, old, simnode.PhaseRefused, simnode.ReasonPreflightFailed, 30*time.Second)
			if old.SentinelExists() || reg.Cluster(w.endpointString()) != nil {
				t.Fatal("a node that failed its preflight started its distribution")
			}

			cp := w.start("cp-0", initDoc, "")
			waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
			t.Logf("init node running after %s", time.Since(start))
			if !cp.SentinelExists() {
				t.Fatal("no sentinel")
			}
			c := reg.Cluster(w.endpointString())
			admin := c.AdminClient()
			n := node(t, admin, "cp-0")
			if n.Spec.ProviderID != distributionProviderID(dist, "cp-0") || n.Labels["node-role.kubernetes.io/control-plane"] != "true" || !hasTaint(n, "node-role.kubernetes.io/control-plane") {
				t.Fatalf("control-plane Node: %+v", n)
			}
			ns := &corev1.Namespace{}
			if err := admin.Get(w.ctx, client.ObjectKey{Name: "from-manifest"}, ns); err != nil {
				t.Fatalf("manifest not applied: %v", err)
			}

			worker := w.start("worker-0", w.doc(render.Node{Role: render.RoleWorker, JoinToken: w.workerToken(c, token.K0sWorkerToken)}), "")
			wrong := w.start("worker-wrong", w.doc(render.Node{Role: render.RoleWorker, JoinToken: w.wrongToken()}), "")
			joinToken := w.k3sToken
			if dist == render.K0s {
				joinToken = w.workerToken(c, token.K0sControllerToken)
			}
			cp1 := w.start("cp-1", w.doc(render.Node{Role: render.RoleControlPlane, PKI: w.pki, JoinToken: joinToken, Hostname: "cp-1"}), "")
			waitPhase(t, worker, simnode.PhaseRunning, simnode.ReasonRunning, time.Minute)
			waitPhase(t, cp1, simnode.PhaseRunning, simnode.ReasonRunning, time.Minute)
			waitPhase(t, wrong, simnode.PhaseBooting, simnode.ReasonJoinFailed, time.Minute)
			t.Logf("wrong token: %s", wrong.Status().Message)
			if wrong.SentinelExists() {
				t.Fatal("the node with the wrong token wrote its sentinel")
			}
			if n := node(t, admin, "worker-0"); !hasTaint(n, "node.cluster.x-k8s.io/uninitialized") || n.Spec.ProviderID != distributionProviderID(dist, "worker-0") {
				t.Fatalf("worker Node: %+v", n.Spec)
			}

			members := c.EtcdMembers()
			if len(members) != 2 {
				t.Fatalf("etcd members %+v, want 2", members)
			}
			// cp-1 leaves etcd.
			if dist == render.K0s {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(simnode.EtcdMemberGVK)
				if err := admin.Get(w.ctx, client.ObjectKey{Name: "cp-1"}, u); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(u.DeepCopy())
				_ = unstructured.SetNestedField(u.Object, true, "spec", "leave")
				if err := admin.Patch(w.ctx, u, patch); err != nil {
					t.Fatal(err)
				}
			} else {
				// A merge patch, as the control plane writes it: the simulated kubelet posts this
				// Node's status meanwhile, so an Update of a read copy can conflict.
				n := node(t, admin, "cp-1")
				patch := client.MergeFrom(n.DeepCopy())
				n.Annotations[simnode.K3sRemoveAnnotation] = "true"
				if err := admin.Patch(w.ctx, n, patch); err != nil {
					t.Fatal(err)
				}
			}
			framework.Eventually(t, 30*time.Second, func() error {
				if m := c.EtcdMembers(); len(m) != 1 || m[0].NodeName != "cp-0" {
					return fmt.Errorf("members %+v", m)
				}
				if dist == render.K0s {
					u := &unstructured.Unstructured{}
					u.SetGroupVersionKind(simnode.EtcdMemberGVK)
					if err := admin.Get(w.ctx, client.ObjectKey{Name: "cp-1"}, u); err != nil {
						return err
					}
					if s, _, _ := unstructured.NestedString(u.Object, "status", "reconcileStatus"); s != "Success" {
						return fmt.Errorf("reconcileStatus %q", s)
					}
					return nil
				}
				n := node(t, admin, "cp-1")
				if n.Annotations[simnode.K3sRemovedNodeNameAnnotation] == "" || n.Annotations[simnode.K3sNodeNameAnnotation] != "" {
					return fmt.Errorf("annotations %v", n.Annotations)
				}
				return nil
			})

			// Kubelets renew their Node Lease, as real ones do.
			lease := &coordinationv1.Lease{}
			if err := admin.Get(w.ctx, client.ObjectKey{Namespace: "kube-node-lease", Name: "worker-0"}, lease); err != nil {
				t.Fatalf("the worker's kubelet keeps no Node Lease: %v", err)
			}
			if err := worker.SetReady(w.ctx, false, ""); err != nil {
				t.Fatal(err)
			}
			for _, cond := range node(t, admin, "worker-0").Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionFalse {
					t.Fatalf("Ready is %s after the injected failure", cond.Status)
				}
			}
			// A machine that loses power stops its kubelet: the cluster's own node lifecycle
			// controller (kube-controller-manager) marks its Node Unknown and unreachable once
			// the grace period passed, while the running control-plane node stays Ready.
			off := time.Now()
			if err := worker.PowerOff(w.ctx); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, simnode.NodeMonitorGracePeriod+time.Minute, func() error {
				n := node(t, admin, "worker-0")
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && (cond.Status != corev1.ConditionUnknown || cond.Reason != "NodeStatusUnknown") {
						return fmt.Errorf("Ready is %s (%s) %s after the power-off", cond.Status, cond.Reason, time.Since(off).Round(time.Second))
					}
				}
				if !hasTaint(n, corev1.TaintNodeUnreachable) {
					return fmt.Errorf("no %s taint yet", corev1.TaintNodeUnreachable)
				}
				return nil
			})
			// The last renewal came at most one renew interval before the power-off.
			if since := time.Since(off); since < simnode.NodeMonitorGracePeriod-simnode.NodeLeaseRenewInterval {
				t.Errorf("the Node went Unknown %s after the power-off, before the grace period of %s", since, simnode.NodeMonitorGracePeriod)
			}
			for _, cond := range node(t, admin, "cp-0").Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
					t.Errorf("the running control-plane node's Ready is %s (%s): its kubelet's heartbeats did not count", cond.Status, cond.Message)
				}
			}

			// The API server belongs to the cluster: it survives its init node.
			reg.StopNode(cp.ProviderID())
			if !c.Running() {
				t.Fatal("the cluster stopped with its init node")
			}
			reg.StopCluster(w.endpointString())
			if c.Running() {
				t.Fatal("the cluster still runs")
			}
			t.Logf("%s took %s", dist, time.Since(start))
		})
	}
}

// TestK3sAgentTokens drives simulated k3s nodes against one cluster whose servers were given
// an agent token: an agent with the agent token joins; an agent with another password, with
// the server token or with a token pinned to another CA, and a server holding the agent token
// as its join token, fail their join and keep retrying (JoinFailed); a joining server without
// the cluster's agent token is refused (BootstrapDataRefused) before it joins etcd.
func TestK3sAgentTokens(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	w := newWorld(t, reg, render.K3s)
	cp := w.start("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}), "")
	waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	c := reg.Cluster(w.endpointString())

	hash, err := token.K3sCAHash(w.pki.ClusterCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	_, _, agentPassword, err := token.ParseK3sToken(w.k3sAgentToken)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherHash, err := token.K3sCAHash(otherCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	mustToken := func(hash, user, password string) string {
		t.Helper()
		s, err := token.FormatK3sToken(hash, user, password)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	otherAgentToken, err := token.NewK3sAgentToken(w.pki.ClusterCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	agentDoc := func(joinToken string) []byte {
		return w.doc(render.Node{Role: render.RoleWorker, JoinToken: joinToken})
	}
	serverDoc := func(name, agentToken string) []byte {
		return w.doc(render.Node{Role: render.RoleControlPlane, PKI: w.pki, JoinToken: w.k3sToken, AgentToken: agentToken, Hostname: name})
	}
	replace := func(doc []byte, old, new string) []byte {
		t.Helper()
		if !strings.Contains(string(doc), old) {
			t.Fatalf("the document does not contain %q", old)
		}
		return []byte(strings.ReplaceAll(string(doc), old, new))
	}

	cases := []struct {
		name   string
		doc    []byte
		phase  simnode.Phase
		reason string
		// message is part of the node's status message.
		message string
	}{
		{name: "agent", doc: agentDoc(w.k3sAgentToken), phase: simnode.PhaseRunning, reason: simnode.ReasonRunning},
		{name: "agent-wrong-password", doc: agentDoc(mustToken(hash, token.K3sAgentUser, "00000000000000000000000000000000")),
			phase: simnode.PhaseBooting, reason: simnode.ReasonJoinFailed, message: "401 Unauthorized"},
		{name: "agent-other-ca", doc: agentDoc(mustToken(otherHash, token.K3sAgentUser, agentPassword)),
			phase: simnode.PhaseBooting, reason: simnode.ReasonJoinFailed, message: "does not match the Cluster CA certificate hash"},
		// The renderer refuses to give agents the server token; a node handed it anyway is
		// refused by the supervisor (its password is not the agent password).
		{name: "agent-server-token", doc: replace(agentDoc(w.k3sAgentToken), w.k3sAgentToken, w.k3sToken),
			phase: simnode.PhaseBooting, reason: simnode.ReasonJoinFailed, message: "401 Unauthorized"},
		// A server joining with the agent token (user "node") as its --token-file.
		{name: "server-node-token", doc: replace(serverDoc("cp-node-token", ""), "content: "+w.k3sToken, "content: "+w.k3sAgentToken),
			phase: simnode.PhaseBooting, reason: simnode.ReasonJoinFailed, message: `user "node"`},
		{name: "server-no-agent-token", doc: replace(serverDoc("cp-no-agent-token", ""), "- --agent-token-file="+render.K3sAgentTokenPath+"\n", ""),
			phase: simnode.PhaseRefused, reason: simnode.ReasonBootstrapDataRefused, message: "no --agent-token-file"},
		{name: "server-other-agent-token", doc: serverDoc("cp-other-agent-token", otherAgentToken),
			phase: simnode.PhaseRefused, reason: simnode.ReasonBootstrapDataRefused, message: "agent token (--agent-token-file) is not the cluster's"},
	}
	nodes := map[string]*simnode.Node{}
	for _, tc := range cases {
		nodes[tc.name] = w.start(tc.name, tc.doc, "")
	}
	for _, tc := range cases {
		n := nodes[tc.name]
		waitPhase(t, n, tc.phase, tc.reason, 2*time.Minute)
		if msg := n.Status().Message; !strings.Contains(msg, tc.message) {
			t.Errorf("%s: message %q does not contain %q", tc.name, msg, tc.message)
		}
		if tc.phase != simnode.PhaseRunning && n.SentinelExists() {
			t.Errorf("%s: refused but wrote its sentinel", tc.name)
		}
		t.Logf("%s: %s", tc.name, n)
	}
	if n := node(t, c.AdminClient(), "agent"); n.Spec.ProviderID != "k3s://agent" {
		t.Errorf("agent Node %+v", n.Spec)
	}
	// Refused servers never became etcd members; the failing joins are still retrying.
	if m := c.EtcdMembers(); len(m) != 1 {
		t.Errorf("etcd members %+v, want only cp-0", m)
	}
	for _, tc := range cases {
		if tc.reason == simnode.ReasonJoinFailed {
			if s := nodes[tc.name].Status(); s.Phase != simnode.PhaseBooting || s.Reason != simnode.ReasonJoinFailed {
				t.Errorf("%s stopped retrying: %s", tc.name, nodes[tc.name])
			}
		}
	}
}
