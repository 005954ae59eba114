package simnode

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// k3sTestToken spells a secure-format k3s token as k3s does (pkg/clientaccess/token.go,
// FormatTokenBytes), independently of the project's token package.
func k3sTestToken(ca []byte, user, password string) string {
	return "K10" + k3sCAHash(ca) + "::" + user + ":" + password
}

func k3sTestCluster(t *testing.T, token, agentToken string, ca []byte) *Cluster {
	t.Helper()
	return &Cluster{pki: &clusterPKI{serverCA: pki.KeyPair{Cert: ca}}, k3sPasswd: newK3sPasswd(token, agentToken)}
}

func newTestCA(t *testing.T) []byte {
	t.Helper()
	ca, err := pki.NewCA("k3s-server-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca.Cert
}

// TestK3sSupervisorTokens checks the simulated supervisor against what k3s accepts and refuses
// once its servers were given an agent token: agents join with the "node" password of the init
// server's --agent-token-file, servers with the server token only, and every token must pin the
// cluster CA.
func TestK3sSupervisorTokens(t *testing.T) {
	ca, otherCA := newTestCA(t), newTestCA(t)
	const spw, npw = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	serverToken, agentToken := k3sTestToken(ca, "server", spw), k3sTestToken(ca, "node", npw)
	c := k3sTestCluster(t, serverToken, agentToken, ca)
	if c.k3sPasswd.server != spw || c.k3sPasswd.node != npw {
		t.Fatalf("passwd %+v: want the passwords after ::server: and ::node:", c.k3sPasswd)
	}

	agents := []struct {
		name, token, want string
	}{
		{"agent token", agentToken, ""},
		{"wrong agent password", k3sTestToken(ca, "node", "00000000000000000000000000000000"), "401 Unauthorized"},
		{"server token on an agent", serverToken, "401 Unauthorized"},
		{"CA hash of another CA", k3sTestToken(otherCA, "node", npw), "does not match the Cluster CA certificate hash"},
		{"not a secure token", npw, "secure format"},
	}
	for _, tc := range agents {
		t.Run("agent/"+tc.name, func(t *testing.T) {
			checkErr(t, c.k3sAgentJoin(tc.token), tc.want)
		})
	}

	servers := []struct {
		name, token, want string
	}{
		{"server token", serverToken, ""},
		{"agent token (user node)", agentToken, `agent token (user "node")`},
		{"node user with the server password", k3sTestToken(ca, "node", spw), `agent token (user "node")`},
		{"wrong server password", k3sTestToken(ca, "server", npw), "401 Unauthorized"},
		{"CA hash of another CA", k3sTestToken(otherCA, "server", spw), "does not match the Cluster CA certificate hash"},
	}
	for _, tc := range servers {
		t.Run("server/"+tc.name, func(t *testing.T) {
			checkErr(t, c.k3sServerJoin(tc.token), tc.want)
		})
	}

	// A joining server's own agent token: the cluster's is kept; none or another would reset
	// the node password on that server (a refusal, not a retried join).
	serverAgentTokens := []struct {
		name, agentToken, want string
	}{
		{"the cluster's agent token", agentToken, ""},
		{"the cluster's agent password pinned to another CA", k3sTestToken(otherCA, "node", npw), "does not match the Cluster CA certificate hash"},
		{"no agent token", "", "has no --agent-token-file"},
		{"another agent password", k3sTestToken(ca, "node", "00000000000000000000000000000000"), "is not the cluster's"},
		{"the server token as agent token", serverToken, "is not the cluster's"},
	}
	for _, tc := range serverAgentTokens {
		t.Run("server agent token/"+tc.name, func(t *testing.T) {
			err := c.k3sCheckServerAgentToken(serverToken, tc.agentToken)
			checkErr(t, err, tc.want)
			if err == nil {
				return
			}
			// A CA hash mismatch fails the join (retried); a password the cluster's agents do
			// not hold is refused for good.
			var r *refusal
			var tr *transient
			if strings.Contains(tc.want, "CA") {
				if !errors.As(err, &tr) || tr.reason != ReasonJoinFailed {
					t.Errorf("%v is not a retried %s", err, ReasonJoinFailed)
				}
			} else if !errors.As(err, &r) || r.reason != ReasonBootstrapDataRefused {
				t.Errorf("%v is not a %s refusal", err, ReasonBootstrapDataRefused)
			}
		})
	}
}

// TestK3sPasswd follows k3s' genUsers/getNodePass and EnsureUser for the cases the project's
// renderer does not produce but a node may be handed.
func TestK3sPasswd(t *testing.T) {
	ca := newTestCA(t)
	serverToken := k3sTestToken(ca, "server", "spw")
	// No agent token: agents join with the server token's password.
	c := k3sTestCluster(t, serverToken, "", ca)
	checkErr(t, c.k3sAgentJoin(serverToken), "")
	checkErr(t, c.k3sAgentJoin(k3sTestToken(ca, "node", "spw")), "")
	checkErr(t, c.k3sCheckServerAgentToken(serverToken, ""), "")
	checkErr(t, c.k3sCheckServerAgentToken(serverToken, k3sTestToken(ca, "node", "npw")), "is not the cluster's")

	// An agent token of user "server": EnsureUser("node", ...) strips only "::node:", so the
	// node password is the whole token and no "node" token matches it.
	odd := k3sTestToken(ca, "server", "npw")
	if got := newK3sPasswd(serverToken, odd).node; got != odd {
		t.Errorf("node password %q, want the whole token", got)
	}
	c = k3sTestCluster(t, serverToken, odd, ca)
	checkErr(t, c.k3sAgentJoin(k3sTestToken(ca, "node", "npw")), "401 Unauthorized")
	// A bare agent password is stored as it is.
	if got := newK3sPasswd(serverToken, "bare").node; got != "bare" {
		t.Errorf("node password %q, want bare", got)
	}
}

// TestAgentTokenFile: --agent-token-file wins over --agent-token and must be written by the
// document.
func TestAgentTokenFile(t *testing.T) {
	p := &plan{flags: parseArgs([]string{"--agent-token=literal", "--agent-token-file=/etc/rancher/k3s/agent-token"}),
		files: map[string]string{"/etc/rancher/k3s/agent-token": "from-file\n"}}
	if got, err := p.agentToken(); err != nil || got != "from-file" {
		t.Errorf("agent token %q, %v", got, err)
	}
	p.files = map[string]string{}
	_, err := p.agentToken()
	var r *refusal
	if !errors.As(err, &r) || r.reason != ReasonBootstrapDataRefused {
		t.Errorf("a missing agent token file: %v", err)
	}
	p.flags = parseArgs([]string{"--agent-token=literal"})
	if got, err := p.agentToken(); err != nil || got != "literal" {
		t.Errorf("agent token %q, %v", got, err)
	}
	p.flags = parseArgs(nil)
	if got, err := p.agentToken(); err != nil || got != "" {
		t.Errorf("agent token %q, %v", got, err)
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want != "" && err == nil:
		t.Errorf("accepted, want an error containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error %q does not contain %q", err, want)
	}
}
