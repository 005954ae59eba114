package simnode_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestEtcdMembersAreReal: three control-plane nodes form a three-member etcd with real member
// adds (k3s: learners, promoted), each member peering at its node's address; the API server
// keeps working with one member's etcd killed or partitioned and fails with two killed or
// partitioned, until they return;
// k0s serves etcd's client port on the node address only when its ClusterConfig says so.
func TestEtcdMembersAreReal(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			w := newWorld(t, reg, dist)
			cp0 := w.start("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}), "")
			waitPhase(t, cp0, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
			c := reg.Cluster(w.endpointString())
			nodes := []*simnode.Node{cp0}
			for _, name := range []string{"cp-1", "cp-2"} {
				joinToken := w.k3sToken
				if dist == render.K0s {
					joinToken = w.workerToken(c, token.K0sControllerToken)
				}
				doc := w.doc(render.Node{Role: render.RoleControlPlane, PKI: w.pki, JoinToken: joinToken, Hostname: name})
				if name == "cp-2" && dist == render.K0s {
					// A ClusterConfig without the node-address client URL: k0s' default.
					doc = []byte(strings.Replace(string(doc), "listen-client-urls: https://0.0.0.0:2379", "listen-client-urls: https://127.0.0.1:2379", 1))
				}
				n := w.start(name, doc, "")
				waitPhase(t, n, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
				nodes = append(nodes, n)
			}
			members := c.EtcdMembers()
			if len(members) != 3 {
				t.Fatalf("etcd members %+v, want 3", members)
			}
			for i, m := range members {
				n := nodes[i]
				if m.NodeName != n.Name() || m.PeerAddress != n.IP() || m.IsLearner || m.MemberID == "" {
					t.Errorf("member %+v, want node %s at %s, promoted", m, n.Name(), n.IP())
				}
				if dist == render.K3s && !strings.HasPrefix(m.Name, n.Name()+"-") {
					t.Errorf("k3s member name %q does not follow the node name %s", m.Name, n.Name())
				}
			}
			// etcd's client port on the node address: k3s always, k0s as its ClusterConfig says.
			for _, n := range nodes {
				want := dist == render.K3s || n.Name() != "cp-2"
				conn, err := net.DialTimeout("tcp", net.JoinHostPort(n.IP(), "2379"), time.Second)
				if err == nil {
					_ = conn.Close()
				}
				if (err == nil) != want {
					t.Errorf("%s: etcd at %s:2379 answers = %v, want %v", n.Name(), n.IP(), err == nil, want)
				}
			}

			write := func(name string) error {
				ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
				defer cancel()
				return c.AdminClient().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
			}
			// EtcdHealth asks each member itself: all three healthy voters, then the killed one
			// not (the scenarios count healthy voters with it).
			healthy := func() (n int, states []string) {
				for _, h := range c.EtcdHealth(w.ctx, 2*time.Second) {
					if h.Healthy && !h.IsLearner {
						n++
					}
					states = append(states, fmt.Sprintf("%+v", h))
				}
				return n, states
			}
			framework.Eventually(t, 30*time.Second, func() error {
				if n, states := healthy(); n != 3 {
					return fmt.Errorf("%d healthy voters, want 3: %v", n, states)
				}
				return nil
			})
			if err := nodes[2].KillEtcd(); err != nil {
				t.Fatal(err)
			}
			if n, states := healthy(); n != 2 {
				t.Errorf("%d healthy voters with one member killed, want 2: %v", n, states)
			}
			framework.Eventually(t, 30*time.Second, func() error { return write("one-down") })
			if err := nodes[1].KillEtcd(); err != nil {
				t.Fatal(err)
			}
			if err := write("two-down"); err == nil {
				t.Fatal("the API server wrote with two of three etcd members down")
			}
			for _, n := range nodes[1:] {
				if err := n.StartEtcd(); err != nil {
					t.Fatal(err)
				}
			}
			framework.Eventually(t, time.Minute, func() error {
				if err := write("back"); err != nil {
					return fmt.Errorf("after the members returned: %w", err)
				}
				return nil
			})

			// Partitions of the peer port: every process keeps running. One member cut off: the
			// other two keep quorum. Two cut off: no two members can talk, no quorum, no writes.
			if err := nodes[0].PartitionEtcd(true); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 30*time.Second, func() error { return write("one-cut") })
			if err := nodes[1].PartitionEtcd(true); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 30*time.Second, func() error {
				if err := write(fmt.Sprintf("two-cut-%d", time.Now().UnixNano())); err == nil {
					return fmt.Errorf("the API server still writes with two of three members partitioned")
				}
				return nil
			})
			for _, n := range nodes[:2] {
				if err := n.PartitionEtcd(false); err != nil {
					t.Fatal(err)
				}
			}
			framework.Eventually(t, time.Minute, func() error {
				if err := write("healed"); err != nil {
					return fmt.Errorf("after the partitions healed: %w", err)
				}
				return nil
			})
		})
	}
}
