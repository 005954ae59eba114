package render

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// serverURL is the URL joining k3s nodes use: the control-plane endpoint.
// The supervisor shares the API server's port (k3s' --supervisor-port
// defaults to --https-listen-port), so a load balancer that forwards the
// endpoint port to the API servers reaches the supervisors too.
func (b *builder) serverURL() string {
	e := b.n.Endpoint
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))}).String()
}

func (b *builder) k3sServer() {
	n := b.n
	b.file(K3sTokenPath, 0o600, strings.TrimSpace(n.JoinToken))
	args := make([]string, 0, 6+len(n.Args))
	if n.Init {
		args = append(args, "--cluster-init")
	} else {
		args = append(args, "--server="+b.serverURL())
	}
	// Every server gets the agent token, not only the first: k3s writes the
	// "node" password from --agent-token into its passwd file on each start,
	// and a server without one would reset it to the server token's
	// password (k3s pkg/daemons/control/deps/deps.go getNodePass and
	// genUsers), locking out agents that hold the agent token.
	b.file(K3sAgentTokenPath, 0o600, strings.TrimSpace(n.AgentToken))
	args = append(args,
		"--token-file="+K3sTokenPath,
		"--agent-token-file="+K3sAgentTokenPath,
		"--tls-san="+n.Endpoint.Host,
		// The port on the node; the endpoint (often a load balancer) may
		// listen on another one.
		"--https-listen-port="+strconv.Itoa(int(n.apiServerPort())),
	)
	args = append(args, n.k3sNetworkArgs()...)
	if n.ExternalProviderID {
		// Agents follow the servers: they run their kubelet with
		// --cloud-provider=external only when the servers run the embedded
		// cloud controller (k3s pkg/cli/server, DisableCCM).
		args = append(args, "--disable-cloud-controller")
	}
	if !n.SingleNode {
		args = append(args, "--node-taint="+ControlPlaneTaint)
	}

	// The token pins the hash of server-ca.crt: these exact bytes.
	p := n.PKI
	tls := K3sTLSDir
	b.file(tls+"/server-ca.crt", 0o644, string(p.ClusterCA.Cert))
	b.file(tls+"/server-ca.key", 0o600, string(p.ClusterCA.Key))
	b.file(tls+"/client-ca.crt", 0o644, string(p.ClusterCA.Cert))
	b.file(tls+"/client-ca.key", 0o600, string(p.ClusterCA.Key))
	b.file(tls+"/request-header-ca.crt", 0o644, string(p.FrontProxyCA.Cert))
	b.file(tls+"/request-header-ca.key", 0o600, string(p.FrontProxyCA.Key))
	b.file(tls+"/etcd/server-ca.crt", 0o644, string(p.EtcdCA.Cert))
	b.file(tls+"/etcd/server-ca.key", 0o600, string(p.EtcdCA.Key))
	b.file(tls+"/etcd/peer-ca.crt", 0o644, string(p.EtcdCA.Cert))
	b.file(tls+"/etcd/peer-ca.key", 0o600, string(p.EtcdCA.Key))
	// service.key verifies service-account tokens, service.current.key
	// signs them (k3s >= 1.28); the same key for both.
	b.file(tls+"/service.key", 0o600, string(p.ServiceAccount.Key))
	b.file(tls+"/service.current.key", 0o600, string(p.ServiceAccount.Key))

	for _, m := range n.Manifests {
		b.file(K3sManifestDir+"/"+K3sManifestPrefix+m.Name+".yaml", 0o600, m.Content)
	}
	if n.VIP != nil {
		b.file(K3sVIPManifest, 0o600, b.kubeVIP)
	}
	b.k3sUserConfig()
	b.cfg.K3s = b.distribution(args)
}

func (b *builder) k3sAgent() {
	n := b.n
	// The agent token (user "node"): it joins agents only.
	b.file(K3sTokenPath, 0o600, strings.TrimSpace(n.JoinToken))
	args := make([]string, 0, 3+len(n.Args))
	args = append(args,
		"--server="+b.serverURL(),
		"--token-file="+K3sTokenPath,
		"--node-taint="+UninitializedTaint,
	)
	b.k3sUserConfig()
	b.cfg.K3sAgent = b.distribution(args)
}

// k3sUserConfig writes Config where k3s reads it at every start.
func (b *builder) k3sUserConfig() {
	if strings.TrimSpace(b.n.Config) == "" {
		return
	}
	b.file(K3sUserConfigPath, 0o600, b.n.Config)
}
