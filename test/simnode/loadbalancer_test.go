package simnode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestAPIServerBehindLoadBalancer: behind an endpoint that forwards to another port on the
// nodes (a cloud load balancer on 443 forwarding to 6443), a server must listen on the
// forwarded port, and k0s must send its clients to the endpoint's port; a document rendered
// as if the nodes served the endpoint port themselves is refused, as its node would never be
// reached.
func TestAPIServerBehindLoadBalancer(t *testing.T) {
	t.Parallel() // its own Registry: nothing shared with the other tests
	reg := newRegistry(t)
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			w := newWorld(t, reg, dist)
			const backend = 6443
			startBehind := func(name string, doc []byte) *simnode.Node {
				t.Helper()
				n, err := w.reg.StartNode(simnode.NodeSpec{Namespace: "test", Name: name, Endpoint: w.endpointString(), APIBackendPort: backend, Data: doc})
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			initNode := func(port int32) render.Node {
				return render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken,
					Hostname: "cp-0", Network: render.Network{APIServerPort: port}}
			}

			// Listening on the endpoint's port: the balancer forwards elsewhere.
			direct := startBehind("cp-direct", w.doc(initNode(0)))
			waitPhase(t, direct, simnode.PhaseRefused, simnode.ReasonBootstrapDataRefused, 30*time.Second)
			if msg := direct.Status().Message; !strings.Contains(msg, "forwards to port 6443") {
				t.Fatalf("refusal does not name the forwarded port: %s", msg)
			}

			if dist == render.K0s {
				// A k0s ClusterConfig listening on 6443 whose externalAddress has no port sends
				// kube-proxy and the kubeconfigs to host:6443, which the balancer does not serve.
				doc := string(w.doc(initNode(backend)))
				advertised := `externalAddress: "` + w.endpointString() + `"`
				if !strings.Contains(doc, advertised) {
					t.Fatalf("the k0s ClusterConfig does not advertise %s:\n%s", w.endpointString(), doc)
				}
				noPort := startBehind("cp-noport", []byte(strings.Replace(doc, advertised, `externalAddress: "`+w.endpoint.Host+`"`, 1)))
				waitPhase(t, noPort, simnode.PhaseRefused, simnode.ReasonBootstrapDataRefused, 30*time.Second)
				if msg := noPort.Status().Message; !strings.Contains(msg, "k0s would send its clients to") {
					t.Fatalf("refusal does not say where k0s sends its clients: %s", msg)
				}
			}

			cp := startBehind("cp-0", w.doc(initNode(backend)))
			waitPhase(t, cp, simnode.PhaseRunning, "", 2*time.Minute)
		})
	}
}
