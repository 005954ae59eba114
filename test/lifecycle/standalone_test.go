package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
)

// version is the Kubernetes version of every Machine: the one of the envtest API server the
// simulated nodes run.
const version = "v1.36.3"

const (
	waitInit     = 3 * time.Minute
	waitMachines = 3 * time.Minute
)

var distributions = []bootstrapv1.Distribution{bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s}

// platformNamespace is created by a manifest of the control-plane KairosConfig.
const platformNamespace = "platform"

// testPassword is the login password of every simulated node: unique enough that finding it in a
// log means it leaked.
const testPassword = "s3cret-for-tests-9f3k2"

func controlPlaneConfig(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{
		Role: bootstrapv1.RoleControlPlane, Distribution: dist, SingleNode: true, UserPassword: testPassword,
		Manifests: []bootstrapv1.Manifest{{
			Name:    "platform-namespace.yaml",
			Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + platformNamespace + "\n",
		}},
	}
}

func workerConfig(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: dist, UserPassword: testPassword}
}

// waitControlPlaneInitialized waits for Cluster API to report the control plane initialized.
func waitControlPlaneInitialized(t *testing.T, tc *harness.TestCluster) {
	t.Helper()
	// Without a control-plane provider Cluster API reports this with the condition only:
	// status.initialization.controlPlaneInitialized comes from a control-plane object.
	harness.WaitForCondition(t, h.Client, tc.Cluster, clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue, "", waitInit)
}

// TestStandaloneControlPlaneAndWorkers creates a Cluster with one control-plane Machine and a
// MachineDeployment of two workers, and checks the result with Cluster API's own status and
// with the workload cluster itself.
func TestStandaloneControlPlaneAndWorkers(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			ctx := framework.Context(t)
			ns := h.NewNamespace(t)
			tc := h.NewCluster(t, ns, "standalone", harness.ClusterOptions{})
			if _, err := tc.CreateMachine(ctx, "cp-0", harness.MachineOptions{
				Version: version, ControlPlane: true, Config: controlPlaneConfig(dist),
			}); err != nil {
				t.Fatal(err)
			}
			md, err := tc.CreateMachineDeployment(ctx, "workers", harness.MachineDeploymentOptions{
				Replicas: 2, Version: version, Config: workerConfig(dist),
			})
			if err != nil {
				t.Fatal(err)
			}

			waitControlPlaneInitialized(t, tc)
			t.Logf("control plane initialized after %s", time.Since(start).Round(time.Second))

			var machines []clusterv1.Machine
			framework.Eventually(t, waitMachines, func() error {
				var err error
				if machines, err = tc.Machines(ctx); err != nil {
					return err
				}
				if len(machines) != 3 {
					return fmt.Errorf("%d Machines, want 3", len(machines))
				}
				for _, m := range machines {
					if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
						return fmt.Errorf("Machine %s is %s with nodeRef %+v (%s)", m.Name, m.Status.Phase, m.Status.NodeRef, machineProblems(&m))
					}
				}
				return nil
			})
			framework.Eventually(t, waitMachines, func() error {
				if err := h.Client.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
					return err
				}
				s := md.Status
				if ptr.Deref(s.ReadyReplicas, 0) != 2 || ptr.Deref(s.AvailableReplicas, 0) != 2 {
					return fmt.Errorf("MachineDeployment ready %v available %v, want 2 and 2", ptr.Deref(s.ReadyReplicas, -1), ptr.Deref(s.AvailableReplicas, -1))
				}
				return nil
			})
			t.Logf("all Machines running and the MachineDeployment available after %s", time.Since(start).Round(time.Second))

			// The kubeconfig Cluster API wrote works against the workload API server.
			wl, err := tc.WorkloadClient(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]*clusterv1.Machine{}
			for i := range machines {
				want[machines[i].Spec.ProviderID] = &machines[i]
			}
			framework.Eventually(t, time.Minute, func() error {
				nodes := &corev1.NodeList{}
				if err := wl.List(ctx, nodes); err != nil {
					return err
				}
				if len(nodes.Items) != 3 {
					return fmt.Errorf("%d Nodes, want 3", len(nodes.Items))
				}
				for _, n := range nodes.Items {
					m := want[n.Spec.ProviderID]
					if m == nil {
						return fmt.Errorf("node %s has providerID %q, which no Machine has", n.Name, n.Spec.ProviderID)
					}
					if m.Status.NodeRef.Name != n.Name {
						return fmt.Errorf("machine %s points at Node %s, not %s", m.Name, m.Status.NodeRef.Name, n.Name)
					}
					for _, taint := range n.Spec.Taints {
						// Workers register with it; Cluster API removes it once it has synced the
						// Machine's labels to the Node.
						if taint.Key == clusterv1.NodeUninitializedTaint.Key {
							return fmt.Errorf("node %s still has the %s taint", n.Name, taint.Key)
						}
						if taint.Key == "node-role.kubernetes.io/control-plane" {
							t.Errorf("single control-plane node %s has the control-plane taint", n.Name)
						}
					}
					if n.Annotations[clusterv1.MachineAnnotation] != m.Name {
						return fmt.Errorf("node %s has no %s annotation for %s yet", n.Name, clusterv1.MachineAnnotation, m.Name)
					}
				}
				return nil
			})

			// Workers were told to register tainted.
			for _, m := range machines {
				n := tc.Node(m.Spec.InfrastructureRef.Name)
				if n == nil {
					t.Fatalf("no simulated node for Machine %s", m.Name)
				}
				if n.Role() == render.RoleWorker {
					if !bootstrapArgsContain(t, ctx, m, render.UninitializedTaint) {
						t.Errorf("worker Machine %s was not told to register with %s", m.Name, render.UninitializedTaint)
					}
				}
			}
			// Every node writes the bootstrap sentinel, and the control-plane node applies the
			// manifests of its KairosConfig. Both come after the kubelet registered (the
			// distribution's manifest applier and the bootstrap unit run once it is up), so a
			// Machine can be Running before: wait for them, as Cluster API does not.
			framework.Eventually(t, time.Minute, func() error {
				for _, m := range machines {
					if n := tc.Node(m.Spec.InfrastructureRef.Name); !n.SentinelExists() {
						return fmt.Errorf("node of Machine %s has no %s: %s", m.Name, render.SentinelPath, n)
					}
				}
				if err := wl.Get(ctx, client.ObjectKey{Name: platformNamespace}, &corev1.Namespace{}); err != nil {
					return fmt.Errorf("namespace %s from the control-plane manifests: %w", platformNamespace, err)
				}
				return nil
			})
			members := tc.SimCluster(ctx).EtcdMembers()
			if len(members) != 1 {
				t.Errorf("etcd members %+v, want the control-plane node only", members)
			}
			t.Logf("%s scenario checked after %s", dist, time.Since(start).Round(time.Second))
		})
	}
}

// bootstrapArgsContain tells whether the Machine's bootstrap data mentions s (as an argument of
// its distribution).
func bootstrapArgsContain(t *testing.T, ctx context.Context, m clusterv1.Machine, s string) bool {
	t.Helper()
	sec := &corev1.Secret{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ptr.Deref(m.Spec.Bootstrap.DataSecretName, "")}, sec); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(sec.Data["value"]), s)
}

// machineProblems summarises the false conditions of a Machine for failure messages.
func machineProblems(m *clusterv1.Machine) string {
	var out []string
	for _, c := range m.Status.Conditions {
		if c.Status != metav1.ConditionTrue && c.Type != clusterv1.PausedCondition && c.Type != clusterv1.DeletingCondition {
			out = append(out, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "no false conditions"
	}
	return strings.Join(out, "; ")
}
