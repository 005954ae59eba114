package simnode

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// The simulated nodes read what they are given in the formats and at the places k0s and k3s
// use, written here from those projects' sources rather than taken from this project's
// renderer: a renderer that writes another format or path fails here as it would on a node.

// Paths of the distributions and of the Cluster API contract.
const (
	// sentinelPath is the bootstrap success sentinel of Cluster API's bootstrap contract
	// (cluster-api docs/book/src/developer/providers/contracts/bootstrap-config.md, "Sentinel
	// file").
	sentinelPath = "/run/cluster-api/bootstrap-success.complete"
	// k0sConfigPath is where k0s reads its ClusterConfig when --config names no other file
	// (k0s pkg/constant: K0sConfigPathDefault).
	k0sConfigPath = "/etc/k0s/k0s.yaml"
	// k0sPKIDir is k0s' certificate directory below its default data dir /var/lib/k0s (k0s
	// pkg/config CfgVars.CertRootDir).
	k0sPKIDir = "/var/lib/k0s/pki"
	// k0sManifestDir holds the manifest stacks k0s applies (k0s pkg/applier, ManifestsDir).
	k0sManifestDir = "/var/lib/k0s/manifests"
	// k3sTLSDir holds a k3s server's CAs (k3s pkg/daemons/control/deps: <data-dir>/server/tls).
	k3sTLSDir = "/var/lib/rancher/k3s/server/tls"
	// k3sManifestDir holds the manifests a k3s server applies (k3s pkg/deploy).
	k3sManifestDir = "/var/lib/rancher/k3s/server/manifests"
	// k0sJoinAPIPort serves k0s' controller join API (k0s docs, networking: 9443).
	k0sJoinAPIPort = 9443
)

// k0sJoinToken is what a k0s join token carries: base64 of gzip of a kubeconfig (k0s
// pkg/token/joindecode.go, DecodeJoinToken) whose user is "kubelet-bootstrap" for worker tokens
// and "controller-bootstrap" for controller tokens, whose server is the API (workers) or the
// join API (controllers), whose CA is the cluster CA and whose token is a bootstrap token
// (k0s pkg/token/kubeconfig.go).
type k0sJoinToken struct {
	controller bool
	server     string
	caCert     []byte
	token      bootstrapToken
}

func (t *k0sJoinToken) role() string {
	if t.controller {
		return "controller"
	}
	return "worker"
}

func parseK0sJoinToken(s string) (*k0sJoinToken, error) {
	gz, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("the kubeconfig has no current context %q", cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cluster == nil || user == nil {
		return nil, fmt.Errorf("the kubeconfig's context %q lacks its cluster or user", cfg.CurrentContext)
	}
	t := &k0sJoinToken{server: cluster.Server, caCert: cluster.CertificateAuthorityData}
	switch kctx.AuthInfo {
	case "controller-bootstrap":
		t.controller = true
	case "kubelet-bootstrap":
	default:
		return nil, fmt.Errorf("user %q is neither controller-bootstrap nor kubelet-bootstrap", kctx.AuthInfo)
	}
	if t.token, err = parseBootstrapToken(user.Token); err != nil {
		return nil, err
	}
	return t, nil
}

// bootstrapToken is a Kubernetes bootstrap token, "<id>.<secret>": 6 and 16 characters of
// [a-z0-9] (k8s.io/cluster-bootstrap/token/api: BootstrapTokenPattern).
type bootstrapToken struct{ id, secret string }

var bootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

func parseBootstrapToken(s string) (bootstrapToken, error) {
	m := bootstrapTokenPattern.FindStringSubmatch(s)
	if m == nil {
		return bootstrapToken{}, fmt.Errorf("%q is not a bootstrap token (<6 chars>.<16 chars>)", redactToken(s))
	}
	return bootstrapToken{id: m[1], secret: m[2]}, nil
}

func (t bootstrapToken) String() string { return t.id + "." + t.secret }

// secretName is the Secret a bootstrap token lives in (bootstrap-token-<id> in kube-system).
func (t bootstrapToken) secretName() string { return "bootstrap-token-" + t.id }

// k3sToken is a k3s token in the secure format K10<sha256 of the CA bundle, hex>::<user>:<password>
// (k3s pkg/clientaccess/token.go, ParseAndValidateToken: the CA hash pins the server's CA).
type k3sToken struct{ caHash, user, password string }

var k3sTokenPattern = regexp.MustCompile(`^K10([0-9a-f]{64})::([^:]+):(.+)$`)

func parseK3sToken(s string) (k3sToken, error) {
	m := k3sTokenPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return k3sToken{}, fmt.Errorf("the k3s token is not in the secure format K10<ca hash>::<user>:<password>")
	}
	return k3sToken{caHash: m[1], user: m[2], password: m[3]}, nil
}

// k3sCAHash is how a k3s node checks the CA it downloads from the server's /cacerts: the
// SHA-256 of the bundle's bytes, hex-encoded (k3s pkg/clientaccess/token.go, hashCA).
func k3sCAHash(bundle []byte) string {
	sum := sha256.Sum256(bundle)
	return hex.EncodeToString(sum[:])
}

// The two users of a k3s server's passwd file (<data-dir>/server/cred/passwd, CSV
// password,user,user,role; k3s pkg/passwd/passwd.go). Agents authenticate to the supervisor
// as "node" whatever user their token names (k3s pkg/agent/config/config.go:
// clientaccess.WithUser("node")); joining servers as "server" (k3s pkg/cluster/bootstrap.go,
// shouldBootstrapLoad: clientaccess.WithUser("server")), and only the "server" user's role
// k3s:server may read /v1-k3s/server-bootstrap (k3s pkg/server/router.go, serverAuthed).
const (
	k3sServerUser = "server"
	k3sNodeUser   = "node"
)

// k3sPasswd is what the two users' entries of a k3s server's passwd file hold.
type k3sPasswd struct{ server, node string }

// newK3sPasswd computes the passwd entries a k3s server writes from its --token(-file) and
// --agent-token(-file) values (k3s pkg/cli/server/server.go reads both files into
// ControlConfig.Token and ControlConfig.AgentToken; pkg/daemons/control/deps/deps.go genUsers
// then calls passwd.EnsureUser("node", getNodePass(...)) and EnsureUser("server", serverPass)):
//   - the server password is the token (getServerPass: config.Token);
//   - the node password is the agent token; without one, the password part of the token
//     (getNodePass: clientaccess.ParseUsernamePassword(serverPass));
//   - EnsureUser keeps only what follows "::<user>:" of a K10 token for that user, and stores
//     anything else whole (k3sPasswdEntry).
//
// The simulated nodes accept only secure-format server tokens (parseK3sToken), so the
// bare-password forms ParseUsernamePassword also reads are not modelled.
func newK3sPasswd(token, agentToken string) k3sPasswd {
	nodePass := agentToken
	if nodePass == "" {
		nodePass = token
		if t, err := parseK3sToken(token); err == nil {
			nodePass = t.password
		}
	}
	return k3sPasswd{server: k3sPasswdEntry(k3sServerUser, token), node: k3sPasswdEntry(k3sNodeUser, nodePass)}
}

// k3sPasswdEntry is the password k3s stores for user from a value it is given (k3s
// pkg/passwd/passwd.go, EnsureUser): for "K10<hash>::<user>:<password>" the password after
// "::<user>:", for anything else (another user's token among them) the whole value.
func k3sPasswdEntry(user, value string) string {
	prefix := "::" + user + ":"
	if i := strings.Index(value, prefix); i > 0 && strings.HasPrefix(value, "K10") {
		return value[i+len(prefix):]
	}
	return value
}

// k3sBootstrapKey is the etcd key under which a k3s server with embedded etcd keeps its
// bootstrap data (CAs, service-account keys, the passwd file), encrypted with the token's
// passphrase: /bootstrap/ and the first 12 hex digits of the passphrase's SHA-256 (k3s
// pkg/cluster/encrypt.go, storageKey and keyHash). The passphrase of a secure-format token is
// its password part (k3s normalizes the token before hashing: util.NormalizeToken); any other
// value is used whole.
func k3sBootstrapKey(token string) string {
	passphrase := strings.TrimSpace(token)
	if t, err := parseK3sToken(passphrase); err == nil {
		passphrase = t.password
	}
	sum := sha256.Sum256([]byte(passphrase))
	return k3sBootstrapPrefix + hex.EncodeToString(sum[:])[:12]
}

const k3sBootstrapPrefix = "/bootstrap/"

// errK3sBootstrapToken is what k3s says when the etcd it starts on holds bootstrap data of
// another token (a snapshot of another cluster restored, or a server given another token):
// it cannot decrypt the cluster's CAs, and does not start (k3s pkg/cluster/bootstrap.go; seen in
// k3s-io/k3s#4640 and rancher/rke2#2410, where a restore on new hosts without the old token
// fails this way).
var errK3sBootstrapToken = errors.New("bootstrap data already found and encrypted with different token")

// checkK3sBootstrapKeys checks the /bootstrap/ keys of an etcd keyspace against want, the
// token's (k3sBootstrapKey): none (a new cluster, where k3s then writes its own) or want pass.
func checkK3sBootstrapKeys(keys []string, want string) error {
	found := false
	for _, k := range keys {
		if !strings.HasPrefix(k, k3sBootstrapPrefix) {
			continue
		}
		if k == want {
			return nil
		}
		found = true
	}
	if found {
		return errK3sBootstrapToken
	}
	return nil
}

// redactToken keeps a token's first characters for messages.
func redactToken(s string) string {
	if len(s) > 8 {
		return s[:8] + "<redacted>"
	}
	return "<redacted>"
}
