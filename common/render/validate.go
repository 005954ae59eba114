package render

import (
	"bytes"
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/syntax"
	"github.com/kairos-capi/kairos-capi/common/token"
)

var hostPrefixRegex = regexp.MustCompile(`^[a-z0-9][-a-z0-9]*$`)

// isDNSName reports whether s is a lowercase RFC 1123 DNS name (labels of
// [a-z0-9-], not starting or ending with '-', at most 63 characters; at most
// 253 in all). Hand-written: validation runs on every render.
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			label++
		case c == '-':
			if label == 0 || i+1 == len(s) || s[i+1] == '.' {
				return false
			}
			label++
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		default:
			return false
		}
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// maxHostnamePrefixLen leaves room for the 8-character suffix in a 63-character
// DNS label.
const maxHostnamePrefixLen = 63 - 8

// parseVersion parses a KubernetesVersion in the grammar the API uses
// (syntax.ParseKubernetesVersion). The leading "v" is optional here, as it
// always was for the renderer: it is added.
func parseVersion(s string) (*version.Version, error) {
	if !strings.HasPrefix(s, "v") {
		s = "v" + s
	}
	return syntax.ParseKubernetesVersion(s)
}

// atLeast reports whether s is a valid version of at least the release min
// (pre-release and build metadata do not count).
func atLeast(s string, min *version.Version) bool {
	v, err := parseVersion(s)
	return err == nil && syntax.CompareRelease(v, min) >= 0
}

// Validate checks a Node and returns every problem found, joined; each is a
// *FieldError (see FieldErrors).
func (n *Node) Validate() error {
	_, err := n.validate()
	return err
}

// validated is what validation computes on the way and rendering reuses.
type validated struct {
	// version is KubernetesVersion with a "v" prefix.
	version string
	// k0sConfig is /etc/k0s/k0s.yaml for k0s controllers.
	k0sConfig string
	// kubeVIPManifest is K3sVIPManifest for k3s servers holding a virtual IP.
	kubeVIPManifest string
}

// validate checks n one concern at a time, each in its own method, and
// reports every problem found (in this order, which the tests pin): what the
// node is, its version, the cluster it joins, its name, users, installation,
// files and commands, manifests, distribution options, credentials, the
// distribution's configuration, and text YAML can carry.
func (n *Node) validate() (validated, error) {
	var p problems
	var out validated
	n.validateKind(&p)
	n.validateRoleFields(&p)
	out.version = n.validateVersion(&p)
	n.validateCluster(&p)
	n.validateVIP(&p)
	n.validateHostname(&p)
	validateUsers(&p, n.Users)
	n.validateInstall(&p)
	n.validateFiles(&p)
	if n.Image != "" && !syntax.IsImageReference(n.Image) {
		// The reference reaches a shell script unquoted by yip: only the grammar of image
		// references (no spaces, quotes or shell metacharacters) may pass.
		p.add("Image", "%q is not an OCI image reference such as quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1", n.Image)
	}
	validateCommands(&p, "PreCommands", n.PreCommands)
	validateCommands(&p, "PostCommands", n.PostCommands)
	n.validateManifests(&p)
	n.validateOptions(&p)
	n.validateEtcdSnapshots(&p)
	n.validateControlPlanePKI(&p)
	n.validateJoinToken(&p)
	out.k0sConfig = n.validateConfig(&p)
	if n.VIP != nil && n.Distribution == K3s && n.Role == RoleControlPlane && p.err() == nil {
		m, err := n.k3sKubeVIPManifest()
		if err != nil {
			p.wrap("VIP", err)
		}
		out.kubeVIPManifest = m
	}
	n.checkUTF8(&p)
	return out, p.err()
}

// validateKind checks the distribution and the role.
func (n *Node) validateKind(p *problems) {
	switch n.Distribution {
	case K0s, K3s:
	case "":
		p.add("Distribution", "required (%q or %q)", K0s, K3s)
	default:
		p.add("Distribution", "unknown distribution %q (want %q or %q)", n.Distribution, K0s, K3s)
	}
	switch n.Role {
	case RoleControlPlane, RoleWorker:
	case "":
		p.add("Role", "required (%q or %q)", RoleControlPlane, RoleWorker)
	default:
		p.add("Role", "unknown role %q (want %q or %q)", n.Role, RoleControlPlane, RoleWorker)
	}
}

// validateRoleFields refuses on other nodes what only control-plane nodes
// take.
func (n *Node) validateRoleFields(p *problems) {
	if n.Role == RoleControlPlane {
		return
	}
	if n.Init {
		p.add("Init", "only control-plane nodes initialise a cluster")
	}
	if n.SingleNode {
		p.add("SingleNode", "only applies to control-plane nodes")
	}
	if len(n.Manifests) > 0 {
		p.add("Manifests", "only control-plane nodes apply manifests")
	}
	if n.PKI != nil {
		p.add("PKI", "only control-plane nodes use the cluster PKI; workers join with JoinToken")
	}
	if n.AgentToken != "" {
		p.add("AgentToken", "only k3s servers take the agent token; agents join with it as JoinToken")
	}
}

func (n *Node) validateVersion(p *problems) string {
	version := n.KubernetesVersion
	switch {
	case version == "":
		p.add("KubernetesVersion", "required")
	default:
		if _, err := parseVersion(version); err != nil {
			p.add("KubernetesVersion", "%q is not a version like v1.31.2", version)
		} else if version[0] != 'v' {
			version = "v" + version
		}
	}
	return version
}

// CheckEndpoint checks a control-plane endpoint as rendering does, so that a
// caller can refuse it (naming its own field) before it builds anything from
// it.
func CheckEndpoint(e Endpoint) error {
	var p problems
	checkEndpoint(&p, e)
	return p.err()
}

func checkEndpoint(p *problems, e Endpoint) {
	switch h := e.Host; {
	case h == "":
		p.add("Endpoint.Host", "required: render only once the control-plane endpoint is known")
	case !isDNSName(strings.ToLower(h)) && net.ParseIP(h) == nil:
		p.add("Endpoint.Host", "%q is neither an IP address nor a DNS name", h)
	}
	if e.Port <= 0 || e.Port > 65535 {
		p.add("Endpoint.Port", "%d is not a TCP port", e.Port)
	}
}

func (n *Node) validateCluster(p *problems) {
	switch {
	case n.ClusterName == "":
		p.add("ClusterName", "required")
	case !isDNSName(n.ClusterName):
		p.add("ClusterName", "%q is not a DNS subdomain name", n.ClusterName)
	}
	checkEndpoint(p, n.Endpoint)
	n.validateNetwork(p)
}

func (n *Node) validateHostname(p *problems) {
	if n.Hostname != "" && n.HostnamePrefix != "" {
		p.add("Hostname", "set either Hostname or HostnamePrefix, not both")
	}
	if h := n.Hostname; h != "" && !isDNSName(h) {
		p.add("Hostname", "%q is not a lowercase DNS name", h)
	}
	if h := n.HostnamePrefix; h != "" && (len(h) > maxHostnamePrefixLen || !hostPrefixRegex.MatchString(h)) {
		p.add("HostnamePrefix", "%q must match [a-z0-9][-a-z0-9]* and be at most %d characters", h, maxHostnamePrefixLen)
	}
}

func (n *Node) validateInstall(p *problems) {
	in := n.Install
	if in == nil {
		return
	}
	if in.Reboot && in.Poweroff {
		p.add("Install", "Reboot and Poweroff are exclusive")
	}
	if in.Auto && !in.Reboot && !in.Poweroff {
		// Kairos' installer neither reboots nor powers off by default; the
		// machine then stays in the live system, where the bootstrap steps
		// are skipped and the distribution never starts.
		p.add("Install.Reboot", "an automatic installation must reboot into the installed system (or power off, for the infrastructure to boot it): without either the machine stays in the live installer and never joins")
	}
	if d := in.Device; d != "" && d != "auto" && !strings.HasPrefix(d, "/dev/") && !strings.HasPrefix(d, "script://") {
		p.add("Install.Device", "%q must be \"auto\", a /dev/... path or script://<command>", d)
	}
}

func (n *Node) validateFiles(p *problems) {
	for i, f := range n.Files {
		field := fmt.Sprintf("Files[%d]", i)
		switch {
		case f.Path == "" || !path.IsAbs(f.Path):
			p.add(field+".Path", "%q must be an absolute path", f.Path)
		case path.Clean(f.Path) != f.Path:
			p.add(field+".Path", "%q is not clean (want %q)", f.Path, path.Clean(f.Path))
		case f.Path == SentinelPath:
			p.add(field+".Path", "%q is the bootstrap sentinel, written only once bootstrap succeeded", f.Path)
		}
		if f.Permissions > 0o777 {
			p.add(field+".Permissions", "%#o is not a file mode yip applies: it keeps only the permission bits 0777 (set special bits with a command)", f.Permissions)
		}
		if f.Owner != "" && !syntax.IsFileOwner(f.Owner) {
			p.add(field+".Owner", "%q must be \"user:group\" (both names or both numeric ids at most %d), matching %s", f.Owner, syntax.MaxID, syntax.FileOwnerPattern)
		}
		for j := range i {
			if n.Files[j].Path == f.Path {
				p.add(field+".Path", "%q is also Files[%d]", f.Path, j)
				break
			}
		}
	}
}

func (n *Node) validateManifests(p *problems) {
	for i, m := range n.Manifests {
		field := fmt.Sprintf("Manifests[%d]", i)
		if !syntax.IsManifestName(m.Name) {
			p.add(field+".Name", "%q must match %s", m.Name, syntax.ManifestNamePattern)
		}
		for j := range i {
			if n.Manifests[j].Name == m.Name {
				p.add(field+".Name", "%q is also Manifests[%d]", m.Name, j)
				break
			}
		}
		if strings.TrimSpace(m.Content) == "" {
			p.add(field+".Content", "empty")
		} else if utf8.ValidString(m.Content) {
			if path, err := checkManifest(m.Content); err != nil {
				p.addAt(field+".Content", path, "%v", err)
			}
		}
	}
}

func (n *Node) validateOptions(p *problems) {
	for i, a := range n.Args {
		if strings.TrimSpace(a) == "" || strings.ContainsAny(a, "\r\n") {
			p.add(fmt.Sprintf("Args[%d]", i), "%q must be a non-empty single line", a)
		}
	}
	for k, v := range n.Env {
		if !syntax.IsEnvName(k) {
			p.add("Env", "%q is not an environment variable name", k)
		}
		if strings.ContainsAny(v, "\r\n") {
			p.add("Env", "the value of %s must be a single line", k)
		}
	}
	n.checkArgs(p)
}

// validateConfig checks Config and returns /etc/k0s/k0s.yaml for k0s
// controllers.
func (n *Node) validateConfig(p *problems) string {
	cp := n.Role == RoleControlPlane
	switch {
	case n.Distribution == K0s && cp:
		conf, err := k0sClusterConfig(n)
		if err != nil {
			p.wrap("Config", err)
		}
		return conf
	case n.Distribution == K0s && n.Config != "":
		p.add("Config", "k0s workers take no ClusterConfig")
	case n.Distribution == K3s && strings.TrimSpace(n.Config) != "":
		n.checkK3sUserConfig(p)
	}
	return ""
}

// checkUTF8 rejects free-text fields that are not valid UTF-8: YAML cannot
// carry them as text.
func (n *Node) checkUTF8(p *problems) {
	check := func(value string, field func() string) {
		if !utf8.ValidString(value) {
			p.add(field(), "is not valid UTF-8")
		}
	}
	check(n.Config, func() string { return "Config" })
	check(n.JoinToken, func() string { return "JoinToken" })
	for i := range n.Files {
		check(n.Files[i].Content, func() string { return fmt.Sprintf("Files[%d].Content", i) })
	}
	for i := range n.Manifests {
		check(n.Manifests[i].Content, func() string { return fmt.Sprintf("Manifests[%d].Content", i) })
	}
	for i, u := range n.Users {
		check(u.Password, func() string { return fmt.Sprintf("Users[%d].Password", i) })
		for j, k := range u.SSHAuthorizedKeys {
			check(k, func() string { return fmt.Sprintf("Users[%d].SSHAuthorizedKeys[%d]", i, j) })
		}
	}
	for i, c := range n.PreCommands {
		check(c, func() string { return fmt.Sprintf("PreCommands[%d]", i) })
	}
	for i, c := range n.PostCommands {
		check(c, func() string { return fmt.Sprintf("PostCommands[%d]", i) })
	}
	for i, a := range n.Args {
		check(a, func() string { return fmt.Sprintf("Args[%d]", i) })
	}
	for k, v := range n.Env {
		check(v, func() string { return "Env." + k })
	}
}

func validateUsers(p *problems, users []User) {
	if len(users) == 0 {
		p.add("Users", "at least one user is required (the Kairos schema requires one)")
	}
	for i, u := range users {
		field := fmt.Sprintf("Users[%d]", i)
		if !syntax.IsLinuxName(u.Name) {
			p.add(field+".Name", "%q must match %s", u.Name, syntax.LinuxNamePattern)
		}
		for j := range i {
			if users[j].Name == u.Name {
				p.add(field+".Name", "%q is also Users[%d]", u.Name, j)
				break
			}
		}
		for j, g := range u.Groups {
			if g == "" || strings.ContainsAny(g, ", \t\r\n:") {
				p.add(fmt.Sprintf("%s.Groups[%d]", field, j), "%q is not a group name", g)
			}
		}
		for j, k := range u.SSHAuthorizedKeys {
			if strings.TrimSpace(k) == "" || strings.ContainsAny(k, "\r\n") {
				p.add(fmt.Sprintf("%s.SSHAuthorizedKeys[%d]", field, j), "must be one non-empty line")
			}
		}
		if strings.ContainsAny(u.Password, "\r\n") {
			p.add(field+".Password", "must be a single line")
		}
	}
}

func validateCommands(p *problems, field string, cmds []string) {
	for i, c := range cmds {
		if strings.TrimSpace(c) == "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "empty command")
		}
	}
}

// validateControlPlanePKI requires the cluster PKI on control-plane nodes
// (workers are refused one in validateRoleFields).
func (n *Node) validateControlPlanePKI(p *problems) {
	if n.Role != RoleControlPlane {
		return
	}
	if n.PKI == nil {
		p.add("PKI", "required on control-plane nodes (init and join)")
		return
	}
	validatePKI(p, n.PKI)
}

// validatePKI checks the shape of the PEM data only: it runs on every render
// and must stay cheap; the PKI helpers that created the material validate it
// properly.
func validatePKI(p *problems, k *PKI) {
	check := func(field string, kp pki.KeyPair, certBlock string) {
		if !bytes.Contains(kp.Cert, []byte("-----BEGIN "+certBlock+"-----")) {
			p.add(field+".Cert", "missing or not a PEM %s", strings.ToLower(certBlock))
		}
		if !bytes.Contains(kp.Key, []byte("PRIVATE KEY-----")) {
			p.add(field+".Key", "missing or not a PEM private key")
		}
	}
	check("PKI.ClusterCA", k.ClusterCA, pki.CertificateBlockType)
	check("PKI.EtcdCA", k.EtcdCA, pki.CertificateBlockType)
	check("PKI.FrontProxyCA", k.FrontProxyCA, pki.CertificateBlockType)
	check("PKI.ServiceAccount", k.ServiceAccount, pki.PublicKeyBlockType)
}

// validateJoinToken checks the tokens of the node's distribution.
func (n *Node) validateJoinToken(p *problems) {
	switch n.Distribution {
	case K0s:
		n.validateK0sTokens(p)
	case K3s:
		n.validateK3sTokens(p)
	}
}

// validateK0sTokens checks the k0s join token: none for the init
// controller, otherwise one of the node's role, and for controllers one that
// trusts the cluster CA.
func (n *Node) validateK0sTokens(p *problems) {
	cp := n.Role == RoleControlPlane
	if n.AgentToken != "" {
		p.add("AgentToken", "only k3s servers take an agent token")
	}
	if cp && n.Init {
		if n.JoinToken != "" {
			p.add("JoinToken", "the init controller creates the cluster and takes no join token")
		}
		return
	}
	if n.JoinToken == "" {
		p.add("JoinToken", "required to join a k0s cluster (a %s token)", n.k0sTokenRole())
		return
	}
	info, err := token.ParseK0sJoinToken(n.JoinToken)
	if err != nil {
		p.add("JoinToken", "not a k0s join token: %v", err)
		return
	}
	if want := n.k0sTokenRole(); info.Role != want {
		p.add("JoinToken", "is a k0s %s token but a %s token is needed", info.Role, want)
	}
	if cp && n.PKI != nil && !bytes.Equal(bytes.TrimSpace(info.CACert), bytes.TrimSpace(n.PKI.ClusterCA.Cert)) {
		p.add("JoinToken", "its CA is not PKI.ClusterCA")
	}
}

// validateK3sTokens checks the k3s tokens: agents join with the agent token,
// servers with the server token and also accept the agent token, both pinning
// the same CA.
func (n *Node) validateK3sTokens(p *problems) {
	cp := n.Role == RoleControlPlane
	wantUser := token.K3sAgentUser
	if cp {
		wantUser = token.K3sServerUser
	}
	hash := n.checkK3sToken(p, "JoinToken", n.JoinToken, wantUser)
	if !cp {
		return
	}
	if n.AgentToken == "" {
		p.add("AgentToken", "required on k3s servers: every server must accept the cluster's agent token, or agents joining through it are refused")
		return
	}
	if agentHash := n.checkK3sToken(p, "AgentToken", n.AgentToken, token.K3sAgentUser); hash != "" && agentHash != "" && agentHash != hash {
		p.add("AgentToken", "pins CA hash %s but JoinToken pins %s", agentHash, hash)
	}
}

// checkK3sToken checks a secure-format k3s token for the user it must carry
// and, on servers, against the CA written to the node. It returns the CA
// hash, or "" when the token is unusable.
func (n *Node) checkK3sToken(p *problems, field, t, wantUser string) string {
	if t == "" {
		p.add(field, "required: a k3s token K10<ca hash>::%s:<password>", wantUser)
		return ""
	}
	hash, user, _, err := token.ParseK3sToken(t)
	if err != nil {
		p.add(field, "%v", err)
		return ""
	}
	switch {
	case user == wantUser:
	case wantUser == token.K3sAgentUser && user == token.K3sServerUser:
		p.add(field, "is the k3s server token: agents must not receive it (whoever reads an agent's bootstrap data could join a server and read the cluster CA keys); give agents the agent token (user %q)", token.K3sAgentUser)
	default:
		p.add(field, "is a token of user %q but a %q token is needed", user, wantUser)
	}
	if n.Role == RoleControlPlane && n.PKI != nil && bytes.Contains(n.PKI.ClusterCA.Cert, []byte("-----BEGIN CERTIFICATE-----")) {
		want, err := token.K3sCAHash(n.PKI.ClusterCA.Cert)
		if err != nil {
			p.add("PKI.ClusterCA.Cert", "%v", err)
		} else if want != hash {
			p.add(field, "pins CA hash %s but PKI.ClusterCA hashes to %s", hash, want)
		}
	}
	return hash
}

func (n *Node) k0sTokenRole() token.K0sTokenRole {
	if n.Role == RoleControlPlane {
		return token.K0sControllerToken
	}
	return token.K0sWorkerToken
}

// parseOwner maps "user:group" to numeric ids when both are numbers (or to
// root for an empty owner); otherwise it returns the string for yip to
// resolve on the node.
func parseOwner(owner string) (uid, gid int, ownerString string) {
	if owner == "" || owner == "root:root" {
		return 0, 0, ""
	}
	u, g, _ := strings.Cut(owner, ":")
	ui, err1 := strconv.Atoi(u)
	gi, err2 := strconv.Atoi(g)
	if err1 == nil && err2 == nil && ui >= 0 && gi >= 0 {
		return ui, gi, ""
	}
	return 0, 0, owner
}
