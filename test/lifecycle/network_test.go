package lifecycle

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestAPIServerPortBehindLoadBalancer: the Cluster's endpoint is a load balancer that forwards
// to port 6443 on the control-plane nodes (a cloud load balancer on 443 in front of 6443; the
// endpoint's random port stands in for 443, which a test cannot bind), and the Cluster says
// spec.clusterNetwork.apiServerPort: 6443. Three control planes and a worker come up: the
// simulated nodes refuse a server that listens anywhere but 6443, a k0s server that would send
// its clients to host:6443, and joins through anything but the endpoint.
func TestAPIServerPortBehindLoadBalancer(t *testing.T) {
	t.Parallel()
	const apiServerPort = 6443
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
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

// TestVirtualIPSurvivesLosingItsHolder: a cluster with no load balancer, whose endpoint is a
// virtual IP the control-plane nodes hold (k0s keepalived, k3s kube-vip). Nothing but the
// holder answers on the endpoint; deleting the holder's Machine moves the address to another
// control-plane node, the cluster stays reachable through <cluster>-kubeconfig, and the
// control plane replaces the Machine through the same address.
func TestVirtualIPSurvivesLosingItsHolder(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 3, cluster: harness.ClusterOptions{VirtualIP: true},
				mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
					// The simulated infrastructure's endpoints are on 127.0.0.1.
					s.KairosConfigSpec.VirtualIP = &bootstrapv1.VirtualIP{Address: "127.0.0.1"}
				}})
			machines := c.waitSettled(3, version, waitScale)
			t.Logf("3 control planes behind the virtual IP after %s", time.Since(start).Round(time.Second))

			sim := c.simCluster()
			holder := sim.VIPHolder()
			if holder == nil {
				t.Fatal("no node holds the virtual IP, yet the cluster came up")
			}
			var held *clusterv1.Machine
			for i := range machines {
				if c.nodeOf(machines[i]) == holder {
					held = &machines[i]
				}
			}
			if held == nil {
				t.Fatalf("the virtual IP is held by %s, which is no control-plane Machine's node", holder.Name())
			}
			if err := h.Client.Delete(c.ctx, held); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, waitScale, func() error {
				if now := sim.VIPHolder(); now == nil || now == holder {
					return fmt.Errorf("the virtual IP is held by %v", now)
				}
				return nil
			})
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := wl.List(c.ctx, &corev1.NodeList{}); err != nil {
				t.Fatalf("the cluster is not reachable through its endpoint after the holder went away: %v", err)
			}
			replaced := c.waitSettled(3, version, 2*waitScale)
			for _, m := range replaced {
				if m.Name == held.Name {
					t.Fatalf("Machine %s, which held the virtual IP, is still there", m.Name)
				}
			}
			nodes := &corev1.NodeList{}
			if err := wl.List(c.ctx, nodes); err != nil {
				t.Fatalf("the cluster is not reachable through its endpoint: %v", err)
			}
			t.Logf("%s: the virtual IP moved to %s, %d Nodes reachable, after %s", dist, sim.VIPHolder().Name(), len(nodes.Items), time.Since(start).Round(time.Second))
		})
	}
}

// TestVanishedVMIsReplaced is a control-plane VM deleted on the hypervisor (its
// KairosSimMachine deleted, as when the VM is gone), on a cluster behind a virtual IP with a
// MachineHealthCheck: the node stops, so its kubelet stops renewing its Lease, the workload
// cluster's node lifecycle controller marks the Node Unknown, the MachineHealthCheck marks the
// Machine unhealthy, and the control plane replaces it and removes the dead etcd member, while
// the endpoint keeps answering. The control plane itself does not remediate a Machine whose
// infrastructure object is gone: like Cluster API's kubeadm control plane it leaves the verdict
// to the MachineHealthCheck, which sees the Node go Unknown within the node monitor grace period.
// k0s only: the heartbeats and the node lifecycle controller do not depend on the distribution,
// and TestEtcdPartitionAndPowerOff replaces a dead member for both.
func TestVanishedVMIsReplaced(t *testing.T) {
	slots.Parallel(t)
	c := newControlPlaneCluster(t, bootstrapv1.DistributionK0s, cpOptions{replicas: 3, cluster: harness.ClusterOptions{VirtualIP: true},
		mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.KairosConfigSpec.VirtualIP = &bootstrapv1.VirtualIP{Address: "127.0.0.1"}
		}})
	machines := c.waitSettled(3, version, waitScale)
	c.createHealthCheck(corev1.ConditionUnknown)
	sim := c.simCluster()
	var gone clusterv1.Machine
	for _, m := range machines {
		if c.nodeOf(m) == sim.VIPHolder() {
			gone = m
		}
	}
	if gone.Name == "" {
		t.Fatal("no control-plane node holds the virtual IP")
	}
	goneNode := c.nodeOf(gone).Name()
	start := time.Now()
	vm := &infrav1.KairosSimMachine{}
	vm.Namespace, vm.Name = gone.Namespace, gone.Spec.InfrastructureRef.Name
	if err := c.h.Client.Delete(c.ctx, vm); err != nil {
		t.Fatal(err)
	}
	wl, err := c.WorkloadClient(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, simnode.NodeMonitorGracePeriod+2*time.Minute, func() error {
		n := &corev1.Node{}
		if err := wl.Get(c.ctx, client.ObjectKey{Name: goneNode}, n); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // remediated already: Cluster API deletes the Node with its Machine
			}
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionUnknown {
				return nil
			}
		}
		return fmt.Errorf("Node %s is still Ready %s after its VM was deleted", goneNode, time.Since(start).Round(time.Second))
	})
	t.Logf("Node %s Unknown %s after its VM was deleted", goneNode, time.Since(start).Round(time.Second))
	replaced := c.waitSettled(3, version, 2*waitScale)
	for _, m := range replaced {
		if m.Name == gone.Name {
			t.Fatalf("Machine %s, whose VM is gone, is still there", m.Name)
		}
	}
	members := sim.EtcdMembers()
	if len(members) != 3 {
		t.Fatalf("etcd members after the replacement %+v, want 3", members)
	}
	for _, m := range members {
		if m.NodeName == goneNode {
			t.Errorf("the vanished node's member %s is still in etcd", m.Name)
		}
	}
	if err := wl.List(c.ctx, &corev1.NodeList{}); err != nil {
		t.Fatalf("the cluster is not reachable through its endpoint after the replacement: %v", err)
	}
	t.Logf("Machine %s replaced %s after its VM was deleted", gone.Name, time.Since(start).Round(time.Second))
}
