package simnode_test

import (
	"net"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestVirtualIPEndpoint: behind a virtual IP nothing answers on the endpoint but a running
// control-plane node that holds the address. Nodes whose documents do not hold it bring up a
// cluster no one reaches and that no other node can join; nodes that hold it (k0s keepalived,
// kube-vip) serve it, and when the holder goes away another one takes over; with none left,
// nothing answers.
func TestVirtualIPEndpoint(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			t.Run("no node holds the address", func(t *testing.T) {
				w := newWorld(t, reg, dist)
				cp0 := w.startVIP("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0"}))
				waitPhase(t, cp0, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
				c := reg.Cluster(w.endpointString())
				if c.VIPHolder() != nil || answers(w.endpointString()) {
					t.Fatal("the endpoint answers, but no node was told to hold the virtual IP")
				}
				w2 := w.joinDoc(c, "cp-1", nil)
				cp1 := w.startVIP("cp-1", w2)
				waitPhase(t, cp1, simnode.PhaseBooting, simnode.ReasonWaitingForControlPlane, 30*time.Second)
			})

			w := newWorld(t, reg, dist)
			vip := &render.VIP{Address: w.endpoint.Host}
			cp0 := w.startVIP("cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0", VIP: vip}))
			waitPhase(t, cp0, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
			c := reg.Cluster(w.endpointString())
			if c.VIPHolder() != cp0 || !answers(w.endpointString()) {
				t.Fatalf("the init node holds the virtual IP: holder %v", c.VIPHolder())
			}
			cp1 := w.startVIP("cp-1", w.joinDoc(c, "cp-1", vip))
			waitPhase(t, cp1, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)

			// The holder goes away: the other node takes the address over, and the endpoint
			// answers again.
			reg.StopNode(cp0.ProviderID())
			if holder := c.VIPHolder(); holder != cp1 {
				t.Fatalf("after the holder stopped the virtual IP is held by %v, want cp-1", holder)
			}
			framework.Eventually(t, 30*time.Second, func() error {
				if !answers(w.endpointString()) {
					return errNotAnswering
				}
				return nil
			})
			reg.StopNode(cp1.ProviderID())
			if c.VIPHolder() != nil || answers(w.endpointString()) {
				t.Fatal("no control-plane node runs, but the endpoint answers")
			}
		})
	}
}

var errNotAnswering = &net.OpError{Op: "dial", Err: net.UnknownNetworkError("the endpoint does not answer")}

// answers tells whether something accepts connections on addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func (w *world) startVIP(name string, doc []byte) *simnode.Node {
	w.t.Helper()
	n, err := w.reg.StartNode(simnode.NodeSpec{Namespace: "test", Name: name, Endpoint: w.endpointString(), EndpointIsVIP: true, Data: doc})
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// joinDoc is the document of a control-plane node joining c.
func (w *world) joinDoc(c *simnode.Cluster, name string, vip *render.VIP) []byte {
	joinToken := w.k3sToken
	if w.dist == render.K0s {
		joinToken = w.workerToken(c, token.K0sControllerToken)
	}
	return w.doc(render.Node{Role: render.RoleControlPlane, PKI: w.pki, JoinToken: joinToken, Hostname: name, VIP: vip})
}
