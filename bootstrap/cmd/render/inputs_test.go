package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/bootstrap/internal/preview"
	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
)

// Inputs of issue 8 ("Bootstrap data a real node cannot misread"), as a user gives them to the
// preview. Each of them rendered (exit 0) before its fix.

// previewInput is a KairosConfig "node-0" with spec, the Cluster "demo" with clusterSpec (its
// whole spec), the cluster's PKI and k3s tokens, and extra documents (Secrets).
func previewInput(t *testing.T, spec, clusterSpec string, extra ...string) []byte {
	t.Helper()
	secrets, err := clusterPKI()
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{
		"apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KairosConfig\nmetadata:\n  name: node-0\nspec:\n" + spec,
		"apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: demo\nspec:\n" + clusterSpec,
		secrets,
	}
	return []byte(strings.Join(append(docs, extra...), "---\n"))
}

const (
	endpoint6443 = "  controlPlaneEndpoint:\n    host: api.demo.example.com\n    port: 6443\n"
	initialized  = "status:\n  initialization:\n    controlPlaneInitialized: true\n"
	k0sWorker    = "  role: worker\n  distribution: k0s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n"
	k0sServer    = "  role: control-plane\n  distribution: k0s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n"
	k3sServer    = "  role: control-plane\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n"
)

// secretDoc is a Secret with one key.
func secretDoc(name, key, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\ndata:\n  %s: %s\n", name, key, base64.StdEncoding.EncodeToString([]byte(value)))
}

// fragmentFromSecret is a spec fragment reading cloud-config from Secret "frag".
const fragmentFromSecret = "  cloudConfigFragments:\n    - name: site\n      contentFrom:\n        name: frag\n"

func TestRefusedInputs(t *testing.T) {
	quoted := "  cloudConfigFragments:\n    - name: site\n      content: |\n        stages:\n          boot:\n            - files:\n                - path: /etc/motd\n                  permissions: \"0644\"\n                  content: hi\n"
	tests := []struct {
		name  string
		input []byte
		// stderr must contain every string.
		want []string
	}{
		// 1. A merged fragment that yip cannot decode.
		{"quoted stage file permissions", previewInput(t, k0sWorker+quoted, endpoint6443),
			[]string{"spec.cloudConfigFragments[0].content", `fragment "site"`, "stages.boot[0].files[0].permissions", "drops every stage"}},
		{"groups as a comma string", previewInput(t, k0sWorker+"  cloudConfigFragments:\n    - name: ops\n      content: |\n        users:\n          - name: ops\n            groups: \"admin, users\"\n", endpoint6443),
			[]string{"spec.cloudConfigFragments[0].content", "users[0].groups", "must be a YAML list"}},
		{"fragment redefining the generated user", previewInput(t, k0sWorker+"  cloudConfigFragments:\n    - name: ops\n      content: |\n        users:\n          - name: kairos\n            passwd: other\n", endpoint6443),
			[]string{"spec.cloudConfigFragments[0].content", `user "kairos" is already defined by the generated document`}},

		// 2. Fragments and manifests from Secrets get the same rules.
		{"Secret fragment with k0s args", previewInput(t, k0sWorker+fragmentFromSecret, endpoint6443+initialized, secretDoc("frag", "value", "k0s-worker:\n  args: [--single]\n")),
			[]string{"no bootstrap data", "spec.cloudConfigFragments[0].contentFrom", "Secret frag key value", "k0s-worker: may not be set by a fragment"}},
		{"Secret fragment with p2p", previewInput(t, k0sWorker+fragmentFromSecret, endpoint6443+initialized, secretDoc("frag", "value", "p2p:\n  network_token: x\n")),
			[]string{"spec.cloudConfigFragments[0].contentFrom", "Secret frag key value", "p2p: may not be set by a fragment"}},
		{"Secret manifest that is not YAML", previewInput(t, k0sServer+"  manifests:\n    - name: cni.yaml\n      contentFrom:\n        name: cni\n", endpoint6443, secretDoc("cni", "value", "kind: [\n")),
			[]string{"spec.manifests[0].contentFrom", "Secret cni key value", "documents[0]: is not valid YAML"}},
		{"Secret fragment that is not UTF-8", previewInput(t, k0sWorker+fragmentFromSecret, endpoint6443+initialized, secretDoc("frag", "value", "hostname: \xff\n")),
			[]string{"spec.cloudConfigFragments[0].contentFrom", "Secret frag key value", "invalid leading UTF-8 octet"}},

		// 3. k3s agents never receive the server token.
		{"k3s server token as a worker token", previewInput(t, "  role: worker\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n  workerToken: K10"+strings.Repeat("ab", 32)+"::server:secret\n", endpoint6443),
			[]string{"spec.workerToken", "is the k3s server token: agents must not receive it"}},

		// 4. The Cluster's network, checked.
		{"bad pod CIDR", previewInput(t, k3sServer, endpoint6443+"  clusterNetwork:\n    pods:\n      cidrBlocks: [10.244.0.0]\n"),
			[]string{"Cluster spec.clusterNetwork.pods.cidrBlocks[0]", "is not a CIDR"}},
		{"k0s before v1.34.1 behind a port-translating load balancer", previewInput(t, k0sServer, "  controlPlaneEndpoint:\n    host: api.demo.example.com\n    port: 443\n  clusterNetwork:\n    apiServerPort: 6443\n"),
			[]string{"Cluster spec.clusterNetwork.apiServerPort", "k0s before v1.34.1"}},

		// 7. Distribution inputs.
		{"unknown ClusterConfig field", previewInput(t, k0sServer+"  k0s:\n    config: |\n      spec:\n        network:\n          podCidr: 10.0.0.0/16\n", endpoint6443),
			[]string{"spec.k0s.config", "spec.network.podCidr: is not a ClusterConfig field", "v1.34.1+k0s.0"}},
		{"ClusterConfig with a bad CIDR", previewInput(t, k0sServer+"  k0s:\n    config: |\n      spec:\n        network:\n          serviceCIDR: 10.96.0.0/40\n", endpoint6443),
			[]string{"spec.k0s.config", "spec.network.serviceCIDR", "is not a CIDR"}},
		{"--token-file with a space", previewInput(t, k0sWorker+"  k0s:\n    args: [\"--token-file /x\"]\n", endpoint6443),
			[]string{"spec.k0s.args[0]", "--token-file is managed by kairos-capi"}},
		{"-c shorthand", previewInput(t, k0sServer+"  k0s:\n    args: [\"-c\", /etc/k0s/other.yaml]\n", endpoint6443),
			[]string{"spec.k0s.args[0]", "--config is managed by kairos-capi"}},
		{"k3s server flag on an agent", previewInput(t, "  role: worker\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n  k3s:\n    args: [--disable=traefik]\n", endpoint6443),
			[]string{"spec.k3s.args[0]", "k3s agent refuses to start"}},
		{"more than a Secret holds", previewInput(t, k0sWorker+"  files:\n    - path: /opt/a\n      content: "+strings.Repeat("a", 700<<10)+"\n    - path: /opt/b\n      content: "+strings.Repeat("b", 700<<10)+"\n", endpoint6443),
			[]string{"spec.files[", "a Secret holds at most 1 MiB"}},

		// 8. An install that stays in the live system.
		{"install that neither reboots nor powers off", previewInput(t, k0sWorker+"  install:\n    reboot: false\n", endpoint6443),
			[]string{"spec.install.reboot", "stay in the live installer"}},

		// 10. Smaller items.
		{"endpoint host that is no host", previewInput(t, k0sWorker, "  controlPlaneEndpoint:\n    host: bad_host\n    port: 6443\n"),
			[]string{"Cluster demo spec.controlPlaneEndpoint.host: \"bad_host\" is neither an IP address nor a DNS name"}},
		{"a file longer than the CRD allows", previewInput(t, k0sWorker+"  files:\n    - path: /opt/a\n      content: "+strings.Repeat("a", (1<<20)+1)+"\n", endpoint6443),
			[]string{"spec.files[0].content", "Too long"}},
		{"more files than the CRD allows", previewInput(t, k0sWorker+"  preCommands:\n"+strings.Repeat("    - \"true\"\n", 101), endpoint6443),
			[]string{"spec.preCommands", "Too many"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := library(t, tc.input, preview.Options{})
			if err == nil {
				t.Fatal("the preview renders it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	// The command itself: exit code 1, nothing on stdout, the library's error on stderr.
	for _, i := range []int{0, 3, 12} {
		tc := tests[i]
		t.Run("command/"+tc.name, func(t *testing.T) {
			res := command(t, tc.input, "-f", "-")
			if res.code != 1 || len(res.stdout) != 0 {
				t.Fatalf("exit code %d, stdout %q", res.code, res.stdout)
			}
			for _, w := range tc.want {
				if !bytes.Contains(res.stderr, []byte(w)) {
					t.Errorf("stderr does not contain %q:\n%s", w, res.stderr)
				}
			}
		})
	}
}

// TestRenderedInputs are inputs of the issue that must render, and what the node gets.
func TestRenderedInputs(t *testing.T) {
	network := "  controlPlaneEndpoint:\n    host: api.demo.example.com\n    port: 443\n  clusterNetwork:\n    apiServerPort: 6443\n" +
		"    pods:\n      cidrBlocks: [10.244.0.0/16]\n    services:\n      cidrBlocks: [10.96.0.0/12]\n    serviceDomain: cluster.example\n"
	tests := []struct {
		name      string
		input     []byte
		want, not []string
	}{
		// 3. Agents get the agent token, servers both.
		{"k3s agent", previewInput(t, "  role: worker\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n", endpoint6443),
			[]string{"::node:"}, []string{"::server:", "agent-token"}},
		{"k3s server", previewInput(t, k3sServer, endpoint6443), []string{"::server:", "::node:", "--agent-token-file=/etc/rancher/k3s/agent-token"}, nil},
		// 4. The Cluster's network reaches both distributions; nodes join through the endpoint.
		{"k3s behind a load balancer on 443", previewInput(t, k3sServer, network+initialized),
			[]string{"--https-listen-port=6443", "--server=https://api.demo.example.com:443", "--cluster-cidr=10.244.0.0/16", "--service-cidr=10.96.0.0/12", "--cluster-domain=cluster.example"}, nil},
		{"k0s v1.34.1 behind a load balancer on 443", previewInput(t, strings.Replace(k0sServer, "v1.31.2", "v1.34.1", 1), network),
			[]string{"port: 6443", "externalAddress: api.demo.example.com:443", "podCIDR: \"10.244.0.0/16\"", "serviceCIDR: \"10.96.0.0/12\"", "clusterDomain: cluster.example"}, nil},
		{"k0s worker behind a load balancer on 443", previewInput(t, k0sWorker, network), []string{"--token-file=/etc/k0s/token"}, nil},
		// 6. Joining k0s controllers get the CA from the join API, not pre-seeded.
		{"joining k0s controller", previewInput(t, k0sServer, endpoint6443+initialized),
			[]string{"--token-file=/etc/k0s/token", "/var/lib/k0s/pki/etcd/ca.key"}, []string{"/var/lib/k0s/pki/ca.key", "/var/lib/k0s/pki/ca.crt"}},
		// 8. install: {} reboots into the installed system.
		{"install: {}", previewInput(t, k0sWorker+"  install: {}\n", endpoint6443), []string{"install:\n  auto: true\n  device: auto\n  reboot: true\n"}, nil},
		// 9. The version is pinned until the first bootstrap only.
		{"preflight", previewInput(t, k0sWorker, endpoint6443), []string{"if [ ! -e /usr/local/lib/kairos-capi/bootstrap.done ]; then", "touch /usr/local/lib/kairos-capi/bootstrap.done"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := library(t, tc.input, preview.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !bytes.Contains(res.Data, []byte(w)) {
					t.Errorf("the document does not contain %q", w)
				}
			}
			for _, w := range tc.not {
				if bytes.Contains(res.Data, []byte(w)) {
					t.Errorf("the document contains %q", w)
				}
			}
			if problems := cloudconfig.CheckNode(res.Data); len(problems) != 0 {
				t.Errorf("a node misreads the document: %v", problems)
			}
		})
	}
}
