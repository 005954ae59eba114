package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// poolTokenTTL is the join-token lifetime of the MachinePool scenario: short, so that "an hour
// after the data was written" (past the lifetime of the token the data holds) comes within
// seconds.
const poolTokenTTL = 30 * time.Second

// TestMachinePoolAddsNodeAfterJoinTokenExpired is issue 8's "a MachinePool adds a node an hour
// after its data was written": a MachinePool's bootstrap data is written once and handed to
// every node the pool ever adds, so the k0s join token inside it must still work when the pool
// scales long after the token's lifetime. The pool's first node joins; the providers then stop
// (nobody refreshes the token) until the workload cluster's real token cleaner has deleted the
// expired token, and a machine booted from the data then is refused by the workload API server;
// the providers come back, the pool scales to two, and the second node joins with the same,
// unchanged data Secret because the bootstrap provider re-created the token from it.
//
// k0s only: k3s agents join with the cluster's static agent token, which does not expire.
func TestMachinePoolAddsNodeAfterJoinTokenExpired(t *testing.T) {
	slots.Parallel(t)
	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(time.Second) }
	dist := bootstrapv1.DistributionK0s
	// An own management cluster: the package's one refreshes tokens on a 2m lifetime.
	hp := harness.Start(t, harness.Options{BootstrapTokenTTL: poolTokenTTL})
	ctx := framework.Context(t)
	ns := hp.NewNamespace(t)
	tc := hp.NewCluster(t, ns, "pool", harness.ClusterOptions{})
	if _, err := tc.CreateMachine(ctx, "cp-0", harness.MachineOptions{
		Version: version, ControlPlane: true, Config: controlPlaneConfig(dist),
	}); err != nil {
		t.Fatal(err)
	}
	worker := workerConfig(dist)
	// One document for every node: each derives its own hostname from its machine id, and
	// its provider ID comes from the pool infrastructure's cloud controller, not from a
	// Machine of its own.
	worker.HostnamePrefix = "pool-"
	worker.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
	const pool = "workers"
	mp, err := tc.CreateMachinePool(ctx, pool, harness.MachinePoolOptions{Replicas: 1, Version: version, Config: worker})
	if err != nil {
		t.Fatal(err)
	}

	// The workload cluster's token cleaner, as the k0s controller runs it.
	framework.Eventually(t, waitInit, func() error {
		if sc := tc.SimCluster(ctx); sc == nil || !sc.Running() {
			return fmt.Errorf("the workload API server of %s does not run yet", tc.Cluster.Name)
		}
		return nil
	})
	cleaner := tc.StartTokenCleaner(t)
	harness.WaitForCondition(t, hp.Client, tc.Cluster, clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue, "", waitInit)
	wl, err := tc.WorkloadClient(ctx)
	if err != nil {
		t.Fatal(err)
	}

	first := waitPoolNodes(t, ctx, hp, tc, wl, mp, 1)[0]
	t.Logf("the pool's first node %s joined after %s", first.node.Name, elapsed())

	dataKey := client.ObjectKey{Namespace: ns, Name: ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, "")}
	data := &corev1.Secret{}
	if err := hp.Client.Get(ctx, dataKey, data); err != nil {
		t.Fatal(err)
	}
	// The token the node was handed, read from the file the document wrote on it.
	tokenFile := first.sim.Files()[render.K0sTokenPath]
	info, err := token.ParseK0sJoinToken(tokenFile)
	if err != nil {
		t.Fatalf("the first node's %s: %v", render.K0sTokenPath, err)
	}
	tokenKey := client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: info.Token.SecretName()}
	if err := wl.Get(ctx, tokenKey, &corev1.Secret{}); err != nil {
		t.Fatalf("bootstrap token Secret %s of the pool's data: %v", tokenKey.Name, err)
	}
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool}}
	harness.WaitForCondition(t, hp.Client, config, bootstrapv1.JoinTokenAvailableCondition, metav1.ConditionTrue, "", time.Minute)

	// The providers go away: nobody refreshes the token any more. The token cleaner deletes it
	// once its expiration has passed.
	if err := hp.StopManager(); err != nil {
		t.Fatal(err)
	}
	t.Logf("manager stopped after %s; waiting for the token to expire", elapsed())
	var expiration time.Time
	framework.Eventually(t, poolTokenTTL+time.Minute, func() error {
		s := &corev1.Secret{}
		err := wl.Get(ctx, tokenKey, s)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if expiration, err = time.Parse(time.RFC3339, string(s.Data["expiration"])); err != nil {
			t.Fatalf("token %s: expiration %q: %v", tokenKey.Name, s.Data["expiration"], err)
		}
		return fmt.Errorf("token %s still exists (expires %s)", tokenKey.Name, expiration.Format(time.RFC3339))
	})
	if gone := time.Now(); expiration.IsZero() || gone.Before(expiration) {
		t.Fatalf("token %s was gone at %s, before its expiration %s: not the token cleaner's doing", tokenKey.Name, gone.Format(time.RFC3339), expiration)
	}
	if exited, err := cleaner.Exited(); exited {
		t.Fatalf("the token cleaner exited: %v\n%s", err, cleaner.Output())
	}
	t.Logf("the token cleaner deleted expired token %s after %s", tokenKey.Name, elapsed())

	// The data now holds a token the workload API server refuses, as a real one would: a
	// machine booted from it cannot join.
	probeNodeRefused(t, ctx, hp, tc, wl, data.Data["value"])

	// Watch the KairosConfig from before the providers return: JoinTokenRecreated lasts until
	// the next refresh, and the watch sees every update.
	recreated := watchJoinTokenReason(t, ctx, hp, config, bootstrapv1.JoinTokenRecreatedReason)
	if err := hp.RestartManager(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-recreated:
		t.Logf("KairosConfig %s: %s=%s %s: %s", pool, c.Type, c.Status, c.Reason, c.Message)
	case <-time.After(time.Minute):
		t.Fatalf("KairosConfig %s never reported %s=True %s after the restart: %s", pool, bootstrapv1.JoinTokenAvailableCondition,
			bootstrapv1.JoinTokenRecreatedReason, conditionOf(ctx, hp, config, bootstrapv1.JoinTokenAvailableCondition))
	}
	framework.Eventually(t, time.Minute, func() error {
		s := &corev1.Secret{}
		if err := wl.Get(ctx, tokenKey, s); err != nil {
			return err
		}
		if string(s.Data["token-secret"]) != info.Token.Secret {
			return fmt.Errorf("re-created token %s does not hold the data's secret", tokenKey.Name)
		}
		return nil
	})

	// An hour later, as far as the token is concerned: the pool adds a node.
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Replicas = ptr.To[int32](2)
	if err := hp.Client.Patch(ctx, mp, patch); err != nil {
		t.Fatal(err)
	}
	nodes := waitPoolNodes(t, ctx, hp, tc, wl, mp, 2)
	t.Logf("the pool's second node joined after %s", elapsed())

	var second *poolNode
	for i := range nodes {
		if nodes[i].sim.ProviderID() != first.sim.ProviderID() {
			second = &nodes[i]
		}
	}
	if second == nil {
		t.Fatalf("the pool's nodes %v do not include a new one", nodes)
	}
	// The first node was left alone: same simulated machine, same Node object.
	for _, n := range nodes {
		if n.sim.ProviderID() == first.sim.ProviderID() && (n.sim != first.sim || n.node.UID != first.node.UID) {
			t.Errorf("the first node of the pool was replaced or restarted")
		}
	}
	if got := second.sim.Files()[render.K0sTokenPath]; got != tokenFile {
		t.Errorf("the second node was handed another join token than the first")
	}
	after := &corev1.Secret{}
	if err := hp.Client.Get(ctx, dataKey, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != data.ResourceVersion || !bytes.Equal(after.Data["value"], data.Data["value"]) {
		t.Errorf("bootstrap data Secret %s changed (resourceVersion %s -> %s): the pool's data must be written once",
			dataKey.Name, data.ResourceVersion, after.ResourceVersion)
	}
	if err := harness.CheckCondition(ctx, hp.Client, config, bootstrapv1.JoinTokenAvailableCondition, metav1.ConditionTrue, ""); err != nil {
		t.Error(err)
	}

	// Scaling down switches a machine off, and Cluster API deletes its Node; deleting the
	// MachinePool switches the rest off.
	patch = client.MergeFrom(mp.DeepCopy())
	mp.Spec.Replicas = ptr.To[int32](1)
	if err := hp.Client.Patch(ctx, mp, patch); err != nil {
		t.Fatal(err)
	}
	kept := waitPoolNodes(t, ctx, hp, tc, wl, mp, 1)[0]
	for _, n := range nodes {
		if n.sim.ProviderID() == kept.sim.ProviderID() {
			continue
		}
		if st := n.sim.Status(); st.Phase != simnode.PhaseStopped {
			t.Errorf("node %s left the pool but is %s", n, st.Phase)
		}
		if err := wl.Get(ctx, client.ObjectKeyFromObject(&n.node), &corev1.Node{}); !apierrors.IsNotFound(err) {
			t.Errorf("node %s left the pool but its Node is still there (%v)", n, err)
		}
	}
	if err := hp.Client.Delete(ctx, mp); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		if err := hp.Client.Get(ctx, client.ObjectKeyFromObject(mp), &clusterv1.MachinePool{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("MachinePool %s still exists (%v)", mp.Name, err)
		}
		if left := hp.Registry.PoolNodes(ns, pool); len(left) > 0 {
			return fmt.Errorf("machines %v of the deleted pool still run", left)
		}
		return nil
	})
	if st := kept.sim.Status(); st.Phase != simnode.PhaseStopped {
		t.Errorf("node %s of the deleted pool is %s", kept, st.Phase)
	}
	t.Logf("MachinePool scenario checked after %s", elapsed())
}

// poolNode is a simulated node of a pool and the Node it registered.
type poolNode struct {
	sim  *simnode.Node
	node corev1.Node
}

func (p poolNode) String() string { return p.sim.ProviderID() + " (" + p.node.Name + ")" }

// waitPoolNodes waits until the MachinePool has n replicas whose Nodes are Ready and
// referenced by the MachinePool, as Cluster API's MachinePool controller reports them from the
// pool's provider IDs, and returns them.
func waitPoolNodes(t *testing.T, ctx context.Context, hp *harness.Harness, tc *harness.TestCluster, wl client.Client, mp *clusterv1.MachinePool, n int) []poolNode {
	t.Helper()
	var out []poolNode
	framework.Eventually(t, waitMachines, func() error {
		if err := hp.Client.Get(ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
			return err
		}
		infra := &infrav1.KairosSimMachinePool{}
		if err := hp.Client.Get(ctx, client.ObjectKeyFromObject(mp), infra); err != nil {
			return err
		}
		if got := ptr.Deref(infra.Status.Replicas, -1); got != int32(n) {
			return fmt.Errorf("KairosSimMachinePool has %d replicas, want %d (%s)", got, n, conditionOf(ctx, hp, infra, infrav1.BootstrapSucceededCondition))
		}
		if !ptr.Deref(mp.Status.Initialization.InfrastructureProvisioned, false) || ptr.Deref(mp.Status.Replicas, -1) != int32(n) {
			return fmt.Errorf("MachinePool infrastructure provisioned %v with %d replicas, want %d",
				mp.Status.Initialization.InfrastructureProvisioned, ptr.Deref(mp.Status.Replicas, -1), n)
		}
		if len(mp.Spec.ProviderIDList) != n || !sets.New(mp.Spec.ProviderIDList...).Equal(sets.New(infra.Spec.ProviderIDList...)) {
			return fmt.Errorf("MachinePool providerIDList %v, KairosSimMachinePool's %v", mp.Spec.ProviderIDList, infra.Spec.ProviderIDList)
		}
		if len(mp.Status.NodeRefs) != n || mp.Status.Phase != string(clusterv1.MachinePoolPhaseRunning) {
			return fmt.Errorf("MachinePool is %s with %d nodeRefs, want Running with %d; its machines: %s", mp.Status.Phase, len(mp.Status.NodeRefs), n,
				describePoolMachines(ctx, hp, wl, mp.Spec.ProviderIDList))
		}
		refs := map[string]types.UID{}
		for _, r := range mp.Status.NodeRefs {
			refs[r.Name] = r.UID
		}
		out = nil
		for _, id := range mp.Spec.ProviderIDList {
			sim := hp.Registry.Node(id)
			if sim == nil {
				return fmt.Errorf("no simulated node has provider ID %s", id)
			}
			node := corev1.Node{}
			if err := wl.Get(ctx, client.ObjectKey{Name: sim.Name()}, &node); err != nil {
				return fmt.Errorf("node of %s: %w", id, err)
			}
			if node.Spec.ProviderID != id || refs[node.Name] != node.UID {
				return fmt.Errorf("node %s (provider ID %s) is not among the MachinePool's nodeRefs %v", node.Name, node.Spec.ProviderID, mp.Status.NodeRefs)
			}
			ready := false
			for _, c := range node.Status.Conditions {
				ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			if !ready {
				return fmt.Errorf("node %s is not Ready", node.Name)
			}
			if !sim.SentinelExists() {
				return fmt.Errorf("node %s wrote no %s", node.Name, render.SentinelPath)
			}
			out = append(out, poolNode{sim: sim, node: node})
		}
		return nil
	})
	return out
}

// describePoolMachines says, for a failure message, what each of a pool's machines is doing and
// which Node, if any, carries its provider ID.
func describePoolMachines(ctx context.Context, hp *harness.Harness, wl client.Client, providerIDs []string) string {
	nodes := &corev1.NodeList{}
	if err := wl.List(ctx, nodes); err != nil {
		return fmt.Sprintf("listing the workload cluster's Nodes: %v", err)
	}
	var out []string
	for _, id := range providerIDs {
		desc := id + ": no simulated machine"
		if sim := hp.Registry.Node(id); sim != nil {
			st := sim.Status()
			desc = fmt.Sprintf("%s: %s %s %q, hostname %q", id, st.Phase, st.Reason, st.Message, st.NodeName)
		}
		node := "no Node has this provider ID"
		for _, n := range nodes.Items {
			if n.Spec.ProviderID == id {
				node = "Node " + n.Name
			}
		}
		out = append(out, desc+", "+node)
	}
	return strings.Join(out, "; ")
}

// probeNodeRefused boots a machine from data outside the pool and checks that the workload API
// server refuses its join: the kubelet's TLS bootstrap authenticates with the data's bootstrap
// token, which no longer exists. The machine is then switched off.
func probeNodeRefused(t *testing.T, ctx context.Context, hp *harness.Harness, tc *harness.TestCluster, wl client.Client, data []byte) {
	t.Helper()
	endpoint, err := tc.Endpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := hp.Registry.StartNode(simnode.NodeSpec{Namespace: tc.Cluster.Namespace, Name: "expired-token-probe", Endpoint: endpoint, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Registry.StopNode(probe.ProviderID())
	framework.Eventually(t, time.Minute, func() error {
		st := probe.Status()
		if st.Reason == simnode.ReasonJoinFailed && strings.Contains(st.Message, "Unauthorized") {
			return nil
		}
		return fmt.Errorf("machine booted from the data with the expired token: %s %s: %s", st.Phase, st.Reason, st.Message)
	})
	hp.Registry.StopNode(probe.ProviderID())
	nodes := &corev1.NodeList{}
	if err := wl.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == probe.ProviderID() {
			t.Fatalf("the machine with the expired token registered Node %s", n.Name)
		}
	}
}

// watchJoinTokenReason watches config and sends its JoinTokenAvailable condition on the
// returned channel the first time it is True with reason.
func watchJoinTokenReason(t *testing.T, ctx context.Context, hp *harness.Harness, config *bootstrapv1.KairosConfig, reason string) <-chan metav1.Condition {
	t.Helper()
	wc, err := client.NewWithWatch(hp.Env.Config, client.Options{Scheme: hp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &bootstrapv1.KairosConfigList{}, client.InNamespace(config.Namespace),
		client.MatchingFields{"metadata.name": config.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	out := make(chan metav1.Condition, 1)
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*bootstrapv1.KairosConfig)
			if !ok {
				continue
			}
			if cond := conditions.Get(c, bootstrapv1.JoinTokenAvailableCondition); cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == reason {
				out <- *cond
				return
			}
		}
	}()
	return out
}

// conditionOf describes a condition of obj for failure messages.
func conditionOf(ctx context.Context, hp *harness.Harness, obj harness.ConditionObject, condType string) string {
	if err := hp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err.Error()
	}
	c := conditions.Get(obj, condType)
	if c == nil {
		return "no " + condType + " condition"
	}
	return fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
}
