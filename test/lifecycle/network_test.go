package lifecycle

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestAPIServerPortBehindLoadBalancer: the Cluster's endpoint is a load balancer that forwards
// to port 6443 on the control-plane nodes (a cloud load balancer on 443 in front of 6443; the
// endpoint's random port stands in for 443, which a test cannot bind), and the Cluster says
// spec.clusterNetwork.apiServerPort: 6443. Three control planes and a worker come up: the
// simulated nodes refuse a server that listens anywhere but 6443, a k0s server that would send
// its clients to host:6443, and joins through anything but the endpoint.
func TestAPIServerPortBehindLoadBalancer(t *testing.T) {
	const apiServerPort = 6443
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 3, cluster: harness.ClusterOptions{
				ClusterNetwork: clusterv1.ClusterNetwork{APIServerPort: apiServerPort},
				LoadBalancer:   &infrav1.KairosSimLoadBalancer{BackendPort: apiServerPort},
			}})
			md, err := c.CreateMachineDeployment(c.ctx, "workers", harness.MachineDeploymentOptions{
				Replicas: 1, Version: version, Config: workerConfig(dist),
			})
			if err != nil {
				t.Fatal(err)
			}
			machines := c.waitSettled(3, version, waitScale)
			t.Logf("3 control planes behind the load balancer after %s", time.Since(start).Round(time.Second))

			endpoint, err := c.Endpoint(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(endpoint, ":"+strconv.Itoa(apiServerPort)) {
				t.Fatalf("the endpoint %s uses the backend port: the scenario proves nothing", endpoint)
			}
			for _, m := range machines {
				listen := "--https-listen-port=6443"
				if dist == "k0s" {
					listen = "port: 6443"
				}
				if !bootstrapArgsContain(t, c.ctx, m, listen) {
					t.Errorf("Machine %s: the bootstrap data does not make the API server listen on 6443 (%q)", m.Name, listen)
				}
			}

			waitAvailable(t, c.ctx, md, 1)
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, time.Minute, func() error {
				nodes := &corev1.NodeList{}
				if err := wl.List(c.ctx, nodes); err != nil {
					return err
				}
				if len(nodes.Items) != 4 {
					return fmt.Errorf("%d Nodes through <cluster>-kubeconfig at %s, want 4", len(nodes.Items), endpoint)
				}
				return nil
			})
			t.Logf("%s cluster behind the load balancer checked after %s", dist, time.Since(start).Round(time.Second))
		})
	}
}
