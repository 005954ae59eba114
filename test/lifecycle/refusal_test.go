package lifecycle

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

const waitRefusal = 2 * time.Minute

// wrongWorkerToken returns credentials that look right (the cluster's CA and endpoint) but that
// the cluster never issued: a k0s worker join token with an unknown bootstrap token, or a k3s
// agent token pinning the right CA with another password.
func wrongWorkerToken(t *testing.T, ctx context.Context, tc *harness.TestCluster, dist bootstrapv1.Distribution) string {
	t.Helper()
	ca := &corev1.Secret{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: tc.Cluster.Namespace, Name: secret.Name(tc.Cluster.Name, secret.ClusterCA)}, ca); err != nil {
		t.Fatal(err)
	}
	caCert := ca.Data[secret.TLSCrtDataName]
	if dist == bootstrapv1.DistributionK3s {
		hash, err := token.K3sCAHash(caCert)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := token.FormatK3sToken(hash, token.K3sAgentUser, "00000000000000000000000000000000")
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ep := tc.Infra.Spec.ControlPlaneEndpoint
	bt, err := token.NewBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	tok, err := token.NewK0sJoinToken(token.K0sWorkerToken, server, caCert, bt)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestWrongTokenIsRefused gives a worker a syntactically valid but wrong join token through a
// workerTokenSecretRef override: its node must never join, so its Machine never gets a nodeRef,
// and the KairosSimMachine surfaces the node's reason.
func TestWrongTokenIsRefused(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			ctx := framework.Context(t)
			ns := h.NewNamespace(t)
			tc := h.NewCluster(t, ns, "wrong-token", harness.ClusterOptions{})
			if _, err := tc.CreateMachine(ctx, "cp-0", harness.MachineOptions{
				Version: version, ControlPlane: true, Config: controlPlaneConfig(dist),
			}); err != nil {
				t.Fatal(err)
			}
			waitControlPlaneInitialized(t, tc)
			if err := tc.Get(ctx); err != nil {
				t.Fatal(err)
			}

			tokenSecret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong-worker-token"},
				StringData: map[string]string{"value": wrongWorkerToken(t, ctx, tc, dist)},
			}
			if err := h.Client.Create(ctx, tokenSecret); err != nil {
				t.Fatal(err)
			}
			config := workerConfig(dist)
			config.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: tokenSecret.Name}
			m, err := tc.CreateMachine(ctx, "worker-0", harness.MachineOptions{Version: version, Config: config})
			if err != nil {
				t.Fatal(err)
			}

			sm := &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker-0"}}
			harness.WaitForCondition(t, h.Client, sm, infrav1.BootstrapSucceededCondition, metav1.ConditionFalse, simnode.ReasonJoinFailed, waitRefusal)
			reason := conditions.Get(sm, infrav1.BootstrapSucceededCondition).Message
			t.Logf("refused after %s: %s", time.Since(start).Round(time.Second), reason)
			if sm.Spec.ProviderID == "" || sm.Status.Initialization.Provisioned == nil || !*sm.Status.Initialization.Provisioned {
				t.Errorf("the machine itself should be provisioned: providerID %q, provisioned %v", sm.Spec.ProviderID, sm.Status.Initialization.Provisioned)
			}

			// The refusal reaches the Machine (InfrastructureReady mirrors the sim machine's Ready)
			// and the node keeps failing: no nodeRef, no Node, no sentinel.
			harness.WaitForCondition(t, h.Client, m, clusterv1.MachineInfrastructureReadyCondition, metav1.ConditionFalse, "", 30*time.Second)
			if msg := conditions.Get(m, clusterv1.MachineInfrastructureReadyCondition).Message; !strings.Contains(msg, "BootstrapSucceeded") {
				t.Errorf("Machine InfrastructureReady message %q does not carry the node's failure", msg)
			}
			wl, err := tc.WorkloadClient(ctx)
			if err != nil {
				t.Fatal(err)
			}
			framework.Consistently(t, 10*time.Second, func() error {
				if err := h.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
					return err
				}
				if m.Status.NodeRef.IsDefined() {
					return fmt.Errorf("machine %s got nodeRef %s with a wrong token", m.Name, m.Status.NodeRef.Name)
				}
				if n := tc.Node("worker-0"); n == nil || n.SentinelExists() || n.Status().Reason != simnode.ReasonJoinFailed {
					return fmt.Errorf("node: %v", n)
				}
				nodes := &corev1.NodeList{}
				if err := wl.List(ctx, nodes); err != nil {
					return err
				}
				if len(nodes.Items) != 1 {
					return fmt.Errorf("%d Nodes, want the control-plane node only", len(nodes.Items))
				}
				return nil
			})
			t.Logf("%s scenario checked after %s", dist, time.Since(start).Round(time.Second))
		})
	}
}

// TestWrongInstalledVersionIsRefused boots the first control-plane Machine from an image that
// ships another version than the Machine asks for: the node's preflight refuses to start the
// distribution, so no workload cluster comes up, no sentinel is written, and the reason is
// surfaced.
func TestWrongInstalledVersionIsRefused(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			ctx := framework.Context(t)
			ns := h.NewNamespace(t)
			tc := h.NewCluster(t, ns, "old-image", harness.ClusterOptions{})
			installed := "v1.35.2+k0s.0"
			if dist == bootstrapv1.DistributionK3s {
				installed = "v1.35.2+k3s1"
			}
			m, err := tc.CreateMachine(ctx, "cp-0", harness.MachineOptions{
				Version: version, ControlPlane: true, Config: controlPlaneConfig(dist),
				Infra: infrav1.KairosSimMachineSpec{InstalledVersion: installed},
			})
			if err != nil {
				t.Fatal(err)
			}
			sm := &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-0"}}
			// The patch helper writes conditions and the rest of the status in two requests, so
			// the condition can be seen a moment before the phase: wait for both.
			framework.Eventually(t, waitRefusal, func() error {
				if err := harness.CheckCondition(ctx, h.Client, sm, infrav1.BootstrapSucceededCondition, metav1.ConditionFalse, simnode.ReasonPreflightFailed); err != nil {
					return err
				}
				if sm.Status.NodePhase != string(simnode.PhaseRefused) {
					return fmt.Errorf("node phase %q, want %s", sm.Status.NodePhase, simnode.PhaseRefused)
				}
				return nil
			})
			msg := conditions.Get(sm, infrav1.BootstrapSucceededCondition).Message
			t.Logf("refused after %s: %s", time.Since(start).Round(time.Second), msg)
			if !strings.Contains(msg, installed) || !strings.Contains(msg, "does not match the requested "+version) {
				t.Errorf("refusal %q does not name the installed and requested versions", msg)
			}
			framework.Consistently(t, 10*time.Second, func() error {
				if n := tc.Node("cp-0"); n == nil || n.SentinelExists() {
					return fmt.Errorf("node %v wrote %s", n, render.SentinelPath)
				}
				if c := tc.SimCluster(ctx); c != nil {
					return fmt.Errorf("a workload API server runs at %s", c.Endpoint())
				}
				if err := h.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
					return err
				}
				if m.Status.NodeRef.IsDefined() {
					return fmt.Errorf("machine %s got a nodeRef", m.Name)
				}
				return harness.CheckCondition(ctx, h.Client, tc.Cluster, clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionFalse, "")
			})
			t.Logf("%s scenario checked after %s", dist, time.Since(start).Round(time.Second))
		})
	}
}
