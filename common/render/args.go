package render

import (
	"fmt"
	"slices"
	"strings"
)

// The rules below apply to every source of distribution arguments: Node.Args,
// Node.Env and the keys of Node.Config (k3s reads config.yaml.d keys as
// flags). They are the one copy of these rules; the bootstrap provider's
// admission runs them through its dry render.
//
// Flag syntax, so that every spelling of a flag is caught:
//   - k3s parses flags with urfave/cli v1 on Go's flag package (k3s
//     pkg/cli/cmds): "--name", "-name", "--name=v", "--name v" and the
//     single-letter aliases its flag definitions declare ("token,t").
//   - k0s parses flags with cobra/pflag (k0s pkg/config/cli.go): "--name",
//     "--name=v", "--name v", and shorthands after one dash, which may be
//     combined ("-dc /etc/k0s.yaml") or carry their value ("-c/etc/k0s.yaml").
//   - provider-kairos joins the args with spaces into the service command
//     line, so one item may hold a flag and its value ("--token-file /x").

// managedFlag is a flag the renderer sets itself.
type managedFlag struct {
	name string
	why  string
	// roles limits the rule to these roles (all when empty).
	roles []Role
}

var k0sManaged = []managedFlag{
	{name: "single", why: "k0s --single refuses every join: a one-node control plane comes from SingleNode (singleNode on a KairosConfig, replicas: 1 on a KairosControlPlane)"},
	{name: "token-file", why: "the join token is written and passed by the renderer (a worker token can be supplied as workerTokenSecretRef)"},
	{name: "config", why: "the renderer writes " + K0sConfigPath + ": put ClusterConfig settings in the k0s config"},
	{name: "enable-worker", why: "controllers always run a kubelet (a controller without one never gets a Node, so its Machine never gets a nodeRef)"},
	{name: "no-taints", why: "the control-plane taint is removed in single-node mode (SingleNode) and kept otherwise"},
	{name: "data-dir", why: "the cluster PKI, manifests and token are written under /var/lib/k0s, which another data directory would ignore"},
}

var k3sManaged = []managedFlag{
	{name: "cluster-init", why: "the first server initializes etcd; the others join", roles: []Role{RoleControlPlane}},
	{name: "server", why: "joining nodes are pointed at the control-plane endpoint"},
	{name: "token", why: "the renderer supplies the token (a worker token can be supplied as workerTokenSecretRef)"},
	{name: "token-file", why: "the renderer supplies the token (a worker token can be supplied as workerTokenSecretRef)"},
	{name: "agent-token", why: "servers get the cluster's agent token from the renderer, so that agents never need the server token", roles: []Role{RoleControlPlane}},
	{name: "agent-token-file", why: "servers get the cluster's agent token from the renderer, so that agents never need the server token", roles: []Role{RoleControlPlane}},
	{name: "https-listen-port", why: "servers listen on the Cluster's spec.clusterNetwork.apiServerPort (the endpoint port when unset)", roles: []Role{RoleControlPlane}},
	{name: "data-dir", why: "the cluster PKI and manifests are written under /var/lib/rancher/k3s, which another data directory would ignore"},
	{name: "config", why: "k3s reads the k3s config from " + K3sUserConfigPath + " next to the default config file; another config file would skip it"},
}

// k3sNetworkFlags are managed when the Cluster sets the value.
func (n *Node) k3sNetworkManaged() []managedFlag {
	var out []managedFlag
	if len(n.Network.PodCIDRs) > 0 {
		out = append(out, managedFlag{name: "cluster-cidr", why: "it comes from the Cluster's spec.clusterNetwork.pods.cidrBlocks", roles: []Role{RoleControlPlane}})
	}
	if len(n.Network.ServiceCIDRs) > 0 {
		out = append(out, managedFlag{name: "service-cidr", why: "it comes from the Cluster's spec.clusterNetwork.services.cidrBlocks", roles: []Role{RoleControlPlane}})
	}
	if n.Network.ServiceDomain != "" {
		out = append(out, managedFlag{name: "cluster-domain", why: "it comes from the Cluster's spec.clusterNetwork.serviceDomain", roles: []Role{RoleControlPlane}})
	}
	return out
}

// k3sShort are the single-letter aliases of k3s server and agent flags (k3s
// pkg/cli/cmds/server.go and agent.go: "token,t", "server,s", "data-dir,d",
// "config,c", "node-ip,i", "write-kubeconfig,o").
var k3sShort = map[string]string{"t": "token", "s": "server", "d": "data-dir", "c": "config", "i": "node-ip", "o": "write-kubeconfig"}

// k0sShort are the pflag shorthands of k0s controller and worker (k0s
// v1.34.1 pkg/config/cli.go and cmd/internal/debug.go); valued says whether
// the shorthand takes a value (which ends a combined cluster like "-dc").
var k0sShort = map[byte]struct {
	name   string
	valued bool
}{
	'c': {"config", true},
	'l': {"logging", true},
	'd': {"debug", false},
	'v': {"verbose", false},
}

// k3sServerOnlyFlags are the flags of "k3s server" that "k3s agent" does not
// define, so an agent refuses to start with them. From k3s
// pkg/cli/cmds/server.go (ServerFlags) and agent.go (the agent command's
// flags), v1.31; names starting with etcd-s3 are matched as a prefix.
var k3sServerOnlyFlags = []string{
	"https-listen-port", "advertise-address", "advertise-port", "tls-san", "tls-san-security",
	"cluster-cidr", "service-cidr", "service-node-port-range", "cluster-dns", "cluster-domain",
	"flannel-backend", "flannel-ipv6-masq", "flannel-external-ip", "egress-selector-mode", "servicelb-namespace",
	"write-kubeconfig", "write-kubeconfig-mode", "write-kubeconfig-group", "helm-job-image",
	"agent-token", "agent-token-file", "cluster-init", "cluster-reset", "cluster-reset-restore-path",
	"kube-apiserver-arg", "etcd-arg", "kube-controller-manager-arg", "kube-scheduler-arg",
	"kube-cloud-controller-manager-arg", "kube-controller-arg", "kube-cloud-controller-arg", "kine-tls",
	"datastore-endpoint", "datastore-cafile", "datastore-certfile", "datastore-keyfile",
	"etcd-expose-metrics", "etcd-disable-snapshots", "etcd-snapshot-name", "etcd-snapshot-schedule-cron",
	"etcd-snapshot-retention", "etcd-snapshot-dir", "etcd-snapshot-compress", "etcd-s3",
	"default-local-storage-path", "disable", "disable-scheduler", "disable-cloud-controller",
	"disable-kube-proxy", "disable-network-policy", "disable-helm-controller", "disable-apiserver",
	"disable-controller-manager", "disable-etcd", "embedded-registry", "supervisor-metrics",
	"system-default-registry", "secrets-encryption", "disable-agent",
}

// k0sControllerOnlyFlags are the flags of "k0s controller" that "k0s worker"
// does not define (k0s v1.34.1 pkg/config/cli.go GetControllerFlags and
// FileInputFlag; the worker command adds only the persistent and worker
// flags, cmd/worker/worker.go).
var k0sControllerOnlyFlags = []string{
	"enable-worker", "disable-components", "single", "no-taints", "enable-k0s-cloud-provider",
	"k0s-cloud-provider-update-frequency", "k0s-cloud-provider-port", "enable-dynamic-config",
	"enable-metrics-scraper", "kube-controller-manager-extra-args", "init-only", "feature-gates", "config",
}

// k3sManagedEnv are the environment variables k3s reads as the managed flags
// (the EnvVar of those flags in k3s pkg/cli/cmds).
var k3sManagedEnv = map[string]string{
	"K3S_TOKEN": "token", "K3S_TOKEN_FILE": "token-file", "K3S_AGENT_TOKEN": "agent-token",
	"K3S_AGENT_TOKEN_FILE": "agent-token-file", "K3S_URL": "server", "K3S_CLUSTER_INIT": "cluster-init",
	"K3S_DATA_DIR": "data-dir", "K3S_CONFIG_FILE": "config",
}

// k3sSnapshotEnv are the environment variables k3s reads as its S3 credentials flags (k3s
// pkg/cli/cmds/server.go, EtcdS3AccessKey and EtcdS3SecretKey): managed only while
// etcdSnapshots is set, so that configs without it keep passing them.
var k3sSnapshotEnv = map[string]string{"AWS_ACCESS_KEY_ID": "etcd-s3-access-key", "AWS_SECRET_ACCESS_KEY": "etcd-s3-secret-key"}

// isK3sSnapshotFlag reports whether a k3s flag configures etcd snapshots or their S3 upload,
// which the renderer sets from etcdSnapshots (docs.k3s.io/cli/etcd-snapshot).
func isK3sSnapshotFlag(name string) bool {
	return strings.HasPrefix(name, "etcd-s3") || strings.HasPrefix(name, "etcd-snapshot") || name == "etcd-disable-snapshots"
}

// argFlags returns the long names of the flags an argument item sets; none
// when the item is a value.
func argFlags(d Distribution, item string) []string {
	s := strings.TrimSpace(item)
	if !strings.HasPrefix(s, "-") || s == "-" || s == "--" {
		return nil
	}
	if d == K0s && !strings.HasPrefix(s, "--") {
		// pflag shorthands: each letter is a flag until one takes a value.
		var out []string
		for i := 1; i < len(s); i++ {
			sh, ok := k0sShort[s[i]]
			if !ok {
				out = append(out, s[i:i+1])
				break
			}
			out = append(out, sh.name)
			if sh.valued {
				break
			}
		}
		return out
	}
	name := strings.TrimLeft(s, "-")
	if i := strings.IndexAny(name, "= \t"); i >= 0 {
		name = name[:i]
	}
	if d == K3s {
		if long, ok := k3sShort[name]; ok {
			name = long
		}
	}
	return []string{name}
}

// flagProblem says why a flag may not be passed by the user, or "".
func (n *Node) flagProblem(name string) string {
	managed := k0sManaged
	if n.Distribution == K3s {
		managed = append(slices.Clip(k3sManaged), n.k3sNetworkManaged()...)
	}
	for _, m := range managed {
		if m.name == name && (len(m.roles) == 0 || slices.Contains(m.roles, n.Role)) {
			return "is managed by kairos-capi: " + m.why
		}
	}
	if n.EtcdSnapshots != nil && n.Distribution == K3s && isK3sSnapshotFlag(name) {
		return "is managed by kairos-capi: etcd snapshots are configured by etcdSnapshots (spec.etcd.snapshots of a KairosControlPlane), which writes " + K3sEtcdSnapshotConfigPath
	}
	if n.Role != RoleWorker {
		return ""
	}
	switch n.Distribution {
	case K3s:
		if slices.Contains(k3sServerOnlyFlags, name) || strings.HasPrefix(name, "etcd-s3") {
			return "is a k3s server flag: k3s agent refuses to start with it (set it on the control plane)"
		}
	case K0s:
		if slices.Contains(k0sControllerOnlyFlags, name) {
			return "is a k0s controller flag: k0s worker refuses to start with it (set it on the control plane)"
		}
	}
	return ""
}

// checkArgs applies the flag rules to Args, Env and, for k3s, the keys of
// Config.
func (n *Node) checkArgs(p *problems) {
	for i, a := range n.Args {
		for _, name := range argFlags(n.Distribution, a) {
			if why := n.flagProblem(name); why != "" {
				p.add(fmt.Sprintf("Args[%d]", i), "--%s %s", name, why)
			}
		}
	}
	if n.Distribution != K3s {
		return
	}
	for k := range n.Env {
		if flag, ok := k3sSnapshotEnv[k]; ok && n.EtcdSnapshots != nil {
			p.add("Env."+k, "k3s reads it as --%s, which %s", flag, n.flagProblem(flag))
		}
		if flag, ok := k3sManagedEnv[k]; ok {
			if why := n.flagProblem(flag); why != "" {
				p.add("Env."+k, "k3s reads it as --%s, which %s", flag, why)
			}
		}
	}
}

// checkK3sConfigKeys applies the flag rules to the keys of a k3s config
// file: k3s turns each key into the flag of the same name.
func (n *Node) checkK3sConfigKeys(p *problems, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// k3s config keys may end in "+" to append to a list flag.
		name := strings.TrimSuffix(k, "+")
		why := n.flagProblem(name)
		if strings.Contains(why, "refuses to start") {
			// From a config file k3s only logs that it skips a flag the
			// command does not define: the setting is lost, not fatal.
			why = "is a k3s server option: k3s agent skips it, so it would have no effect (set it on the control plane)"
		}
		if why != "" {
			p.addAt("Config", k, "%s", why)
		}
	}
}
