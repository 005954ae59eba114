package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	infracontrollers "github.com/kairos-capi/kairos-capi/test/infrastructure/controllers"
)

// TestProviderIDConventions: machines whose infrastructure writes real providers' provider IDs
// (vSphere's vsphere://<BIOS UUID> for the control plane, KubeVirt's kubevirt://<VM name> for
// the workers), known only once each machine exists, on nodes that register their Node the way
// real k0s and k3s do. With the default providerID.source Machine every Machine gets its
// nodeRef. The regression case: workers whose data leaves the provider ID to the distribution
// (what this provider rendered before) never get one: their Nodes register without the
// Machine's provider ID and nobody gives it to them.
func TestProviderIDConventions(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1, infra: infrav1.KairosSimMachineSpec{ProviderIDConvention: infrav1.ProviderIDVSphere}})
			linked, err := c.CreateMachineDeployment(c.ctx, "linked", harness.MachineDeploymentOptions{
				Replicas: 1, Version: version, Config: workerConfig(dist),
				Infra: infrav1.KairosSimMachineSpec{ProviderIDConvention: infrav1.ProviderIDKubeVirt},
			})
			if err != nil {
				t.Fatal(err)
			}
			old := workerConfig(dist)
			old.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			unlinked, err := c.CreateMachineDeployment(c.ctx, "unlinked", harness.MachineDeploymentOptions{
				Replicas: 1, Version: version, Config: old,
				Infra: infrav1.KairosSimMachineSpec{ProviderIDConvention: infrav1.ProviderIDKubeVirt},
			})
			if err != nil {
				t.Fatal(err)
			}
			cp := c.waitSettled(1, version, waitScale)
			if !strings.HasPrefix(cp[0].Spec.ProviderID, "vsphere://") {
				t.Errorf("control-plane Machine provider ID %q, want vsphere://<BIOS UUID>", cp[0].Spec.ProviderID)
			}
			// The node finds what vSphere tells a VM where Kairos' datasource puts it.
			meta, err := c.nodeOf(cp[0]).ReadFile(infracontrollers.VSphereMetadataPath)
			if err != nil || !strings.Contains(string(meta), "local-hostname: \""+cp[0].Spec.InfrastructureRef.Name+"\"") {
				t.Errorf("vSphere metadata on the node (%v):\n%s", err, meta)
			}

			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			mdMachine := func(md *clusterv1.MachineDeployment) (*clusterv1.Machine, error) {
				list := &clusterv1.MachineList{}
				if err := h.Client.List(c.ctx, list, client.InNamespace(c.Cluster.Namespace),
					client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
					return nil, err
				}
				if len(list.Items) != 1 {
					return nil, fmt.Errorf("%d Machines of %s, want 1", len(list.Items), md.Name)
				}
				return &list.Items[0], nil
			}
			framework.Eventually(t, waitMachines, func() error {
				m, err := mdMachine(linked)
				if err != nil {
					return err
				}
				if !m.Status.NodeRef.IsDefined() {
					return fmt.Errorf("Machine %s (%s) has no nodeRef: %s", m.Name, m.Spec.ProviderID, machineProblems(m))
				}
				node := &corev1.Node{}
				if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node); err != nil {
					return err
				}
				if node.Name != m.Name || node.Spec.ProviderID != m.Spec.ProviderID || !strings.HasPrefix(node.Spec.ProviderID, "kubevirt://") {
					return fmt.Errorf("Node %s has provider ID %q; Machine %s has %q", node.Name, node.Spec.ProviderID, m.Name, m.Spec.ProviderID)
				}
				config := &bootstrapv1.KairosConfig{}
				if err := h.Client.Get(c.ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, config); err != nil {
					return err
				}
				if !conditions.IsTrue(config, bootstrapv1.NodeProviderIDCondition) {
					return fmt.Errorf("KairosConfig %s NodeProviderID: %+v", config.Name, conditions.Get(config, bootstrapv1.NodeProviderIDCondition))
				}
				return nil
			})
			t.Logf("control plane and linked worker after %s", time.Since(start).Round(time.Second))

			// The regression: the node runs and its Node exists, but nothing links it.
			var stray *clusterv1.Machine
			framework.Eventually(t, waitMachines, func() error {
				m, err := mdMachine(unlinked)
				if err != nil {
					return err
				}
				if m.Spec.ProviderID == "" || c.nodeOf(*m) == nil || c.nodeOf(*m).Name() == "" {
					return fmt.Errorf("Machine %s: no provider ID or no registered node yet", m.Name)
				}
				stray = m
				return nil
			})
			framework.Consistently(t, 15*time.Second, func() error {
				m := &clusterv1.Machine{}
				if err := h.Client.Get(c.ctx, client.ObjectKeyFromObject(stray), m); err != nil {
					return err
				}
				if m.Status.NodeRef.IsDefined() {
					return fmt.Errorf("Machine %s got nodeRef %s although no Node carries %s", m.Name, m.Status.NodeRef.Name, m.Spec.ProviderID)
				}
				return nil
			})
			node := &corev1.Node{}
			if err := wl.Get(c.ctx, client.ObjectKey{Name: c.nodeOf(*stray).Name()}, node); err != nil {
				t.Fatal(err)
			}
			// k0s registers none; k3s would register k3s://<name> from its embedded cloud
			// controller, but this cluster's servers run without it (their data says source
			// Machine), and agents follow the servers.
			if node.Spec.ProviderID != "" {
				t.Errorf("the distribution gave Node %s provider ID %q, want none", node.Name, node.Spec.ProviderID)
			}
			if cond := conditions.Get(stray, clusterv1.MachineNodeHealthyCondition); cond == nil || cond.Status == metav1.ConditionTrue {
				t.Errorf("Machine %s NodeHealthy %+v, want not true", stray.Name, cond)
			}
		})
	}
}
