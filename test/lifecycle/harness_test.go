package lifecycle

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestHarnessManagerRestart restarts the manager between creating a Cluster and its first
// Machine: the new manager (fresh caches, ClusterCache and controllers in the same process)
// serves the webhooks and carries on. The Machine's image is outdated so that no workload API
// server is started. It also checks that the KairosSimCluster's failure domains reach the
// Cluster and that the machine is placed in its Machine's failure domain. Not parallel: it
// restarts the manager every scenario shares.
func TestHarnessManagerRestart(t *testing.T) {
	ctx := framework.Context(t)
	ns := h.NewNamespace(t)
	tc := h.NewCluster(t, ns, "restart", harness.ClusterOptions{FailureDomains: []infrav1.KairosSimFailureDomain{
		{Name: "fd-a", ControlPlane: ptr.To(true)}, {Name: "fd-b", ControlPlane: ptr.To(false)},
	}})
	harness.WaitForCondition(t, h.Client, tc.Cluster, clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionTrue, "", time.Minute)
	framework.Eventually(t, 30*time.Second, func() error {
		if err := h.Client.Get(ctx, client.ObjectKeyFromObject(tc.Cluster), tc.Cluster); err != nil {
			return err
		}
		got := map[string]bool{}
		for _, fd := range tc.Cluster.Status.FailureDomains {
			got[fd.Name] = ptr.Deref(fd.ControlPlane, false)
		}
		if len(got) != 2 || !got["fd-a"] || got["fd-b"] {
			return fmt.Errorf("cluster failure domains %+v", tc.Cluster.Status.FailureDomains)
		}
		return nil
	})
	before, err := tc.Endpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := h.RestartManager(); err != nil {
		t.Fatal(err)
	}
	t.Logf("manager restarted in %s", time.Since(start).Round(time.Millisecond))

	// Creating the Machine goes through the webhooks of the new manager.
	if _, err := tc.CreateMachine(ctx, "cp-0", harness.MachineOptions{
		Version: version, ControlPlane: true, Config: controlPlaneConfig(bootstrapv1.DistributionK0s),
		Infra:         infrav1.KairosSimMachineSpec{InstalledVersion: "v1.35.2+k0s.0"},
		FailureDomain: "fd-a",
	}); err != nil {
		t.Fatal(err)
	}
	sm := &infrav1.KairosSimMachine{}
	sm.Namespace, sm.Name = ns, "cp-0"
	harness.WaitForCondition(t, h.Client, sm, infrav1.BootstrapSucceededCondition, metav1.ConditionFalse, simnode.ReasonPreflightFailed, waitRefusal)
	if sm.Status.FailureDomain != "fd-a" {
		t.Errorf("KairosSimMachine placed in %q, want fd-a", sm.Status.FailureDomain)
	}
	if after, err := tc.Endpoint(ctx); err != nil || after != before {
		t.Fatalf("endpoint %s before the restart, %s (%v) after", before, after, err)
	}
}
