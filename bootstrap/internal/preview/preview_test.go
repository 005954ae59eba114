package preview_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/preview"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/webhooks"
	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"sigs.k8s.io/yaml"
)

// material is cluster PKI and a k3s token generated once, handed to previews as Secrets so
// that most tests do not pay for key generation and their output is reproducible.
type material struct {
	certs         map[string]*pki.KeyPair // by Secret name suffix: ca, etcd, proxy, sa
	k3sToken      string
	k3sAgentToken string
}

var materialOnce = sync.OnceValues(func() (*material, error) {
	m := &material{certs: map[string]*pki.KeyPair{}}
	for _, suffix := range []string{"ca", "etcd", "proxy"} {
		ca, err := pki.NewCA(suffix, time.Hour)
		if err != nil {
			return nil, err
		}
		m.certs[suffix] = ca
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		return nil, err
	}
	m.certs["sa"] = sa
	if m.k3sToken, err = token.NewK3sToken(m.certs["ca"].Cert); err != nil {
		return nil, err
	}
	m.k3sAgentToken, err = token.NewK3sAgentToken(m.certs["ca"].Cert)
	return m, err
})

func testMaterial(t *testing.T) *material {
	t.Helper()
	m, err := materialOnce()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// clusterSecrets returns the YAML documents of a cluster's certificate Secrets and, when
// withToken is set, its k3s token Secret.
func clusterSecrets(t *testing.T, cluster string, withToken bool) string {
	t.Helper()
	m := testMaterial(t)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	var docs []string
	for _, suffix := range []string{"ca", "etcd", "proxy", "sa"} {
		kp := m.certs[suffix]
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-%s\ntype: cluster.x-k8s.io/secret\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
			cluster, suffix, b64(kp.Cert), b64(kp.Key)))
	}
	if withToken {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-k3s-token\nstringData:\n  value: %q\n  agent-token: %q\n", cluster, m.k3sToken, m.k3sAgentToken))
	}
	return strings.Join(docs, "---\n")
}

func config(name, role, dist string, extra string) string {
	return fmt.Sprintf(`apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KairosConfig
metadata:
  name: %s
spec:
  role: %s
  distribution: %s
  kubernetesVersion: v1.31.2
  userPassword: not-the-default
%s`, name, role, dist, extra)
}

func cluster(name, host string, initialized bool) string {
	s := fmt.Sprintf(`apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: %s
spec:
  controlPlaneEndpoint:
    host: %s
    port: 6443
`, name, host)
	if initialized {
		s += "status:\n  initialization:\n    controlPlaneInitialized: true\n"
	}
	return s
}

func docs(parts ...string) string { return strings.Join(parts, "\n---\n") }

func run(t *testing.T, input string, opts preview.Options) (*preview.Result, error) {
	t.Helper()
	return preview.Render(context.Background(), bufio.NewReader(strings.NewReader(input)), opts)
}

func mustRun(t *testing.T, input string, opts preview.Options) []byte {
	t.Helper()
	res, err := run(t, input, opts)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if len(res.Data) == 0 {
		t.Fatal("Render returned no data")
	}
	// The preview must be a document the renderer's own model reads back.
	if _, err := cloudconfig.UnmarshalStrict(res.Data); err != nil {
		t.Fatalf("preview does not parse strictly: %v\n%s", err, res.Data)
	}
	if !cloudconfig.HasHeader(res.Data) {
		t.Fatalf("preview has no #cloud-config header:\n%s", res.Data)
	}
	return res.Data
}

func assertContains(t *testing.T, doc []byte, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(string(doc), s) {
			t.Errorf("preview does not contain %q", s)
		}
	}
}

// fileContent returns the content of a file a stage of the document writes.
func fileContent(t *testing.T, doc []byte, path string) string {
	t.Helper()
	c, err := cloudconfig.UnmarshalStrict(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, steps := range c.Stages {
		for _, step := range steps {
			for _, f := range step.Files {
				if f.Path == path {
					return f.Content
				}
			}
		}
	}
	t.Fatalf("the document writes no %s", path)
	return ""
}

func assertNotContains(t *testing.T, doc []byte, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(string(doc), s) {
			t.Errorf("preview contains %q", s)
		}
	}
}

func TestK0sControlPlaneWithoutCluster(t *testing.T) {
	data := mustRun(t, config("cp-0", "control-plane", "k0s", ""), preview.Options{})
	c, err := cloudconfig.UnmarshalStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.K0s == nil || !c.K0s.Enabled {
		t.Fatalf("no enabled k0s block:\n%s", data)
	}
	assertContains(t, data,
		preview.DefaultEndpoint.Host, // the documentation endpoint stands in for the Cluster's
		`externalAddress: "192.0.2.10"`,
		"name: preview", // the stand-in Cluster's name
		render.K0sPKIDir+"/ca.crt", render.K0sPKIDir+"/etcd/ca.key", render.K0sPKIDir+"/sa.key",
		"-----BEGIN CERTIFICATE-----", // PKI generated for the preview
		"want=v1.31.2",
	)
	// The first control-plane node initializes the cluster: no join token.
	assertNotContains(t, data, "--token-file", render.K0sTokenPath)
	if preview.DefaultEndpoint.Host != "192.0.2.10" || preview.DefaultEndpoint.Port != 6443 {
		t.Errorf("DefaultEndpoint = %+v", preview.DefaultEndpoint)
	}
}

func TestClusterNameLabelWithoutCluster(t *testing.T) {
	in := strings.Replace(config("cp-0", "control-plane", "k0s", ""), "  name: cp-0\n",
		"  name: cp-0\n  labels:\n    cluster.x-k8s.io/cluster-name: labelled\n", 1)
	data := mustRun(t, docs(in, clusterSecrets(t, "labelled", false)), preview.Options{})
	assertContains(t, data, "name: labelled", "cluster labelled")
	// The certificates given in the input are used, not generated ones.
	if got := fileContent(t, data, render.K0sPKIDir+"/ca.crt"); got != string(testMaterial(t).certs["ca"].Cert) {
		t.Errorf("ca.crt is not the input's CA:\n%s", got)
	}
}

func TestK3sWorkerWithClusterAndSecret(t *testing.T) {
	m := testMaterial(t)
	worker := config("worker-0", "worker", "k3s", `  files:
    - path: /etc/motd
      permissions: "0644"
      contentFrom:
        name: node-files
        key: motd
`)
	worker = strings.Replace(worker, "  userPassword: not-the-default\n", "  userPasswordSecretRef:\n    name: node-password\n", 1)
	input := docs(
		worker,
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: node-password\nstringData:\n  value: password-from-secret\n",
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: node-files\nstringData:\n  motd: motd-from-secret\n",
		cluster("demo", "api.demo.example.com", false),
		clusterSecrets(t, "demo", true),
	)
	res, err := run(t, input, preview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings for a password from a Secret: %v", res.Warnings)
	}
	data := mustRun(t, input, preview.Options{})
	c, err := cloudconfig.UnmarshalStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.K3sAgent == nil || c.K3s != nil {
		t.Fatalf("not a k3s agent document:\n%s", data)
	}
	assertContains(t, data,
		"passwd: password-from-secret",
		"motd-from-secret",
		"--server=https://api.demo.example.com:6443",
		m.k3sAgentToken, // the cluster's agent token from the input
	)
	// Never the server token: it would let whoever reads this data join a server.
	assertNotContains(t, data, "192.0.2.10", "-----BEGIN", "not-the-default", m.k3sToken, "::server:")
}

func TestControlPlaneOfInitializedClusterJoins(t *testing.T) {
	caPath := map[string]string{"k0s": render.K0sPKIDir + "/ca.crt", "k3s": render.K3sTLSDir + "/server-ca.crt"}
	for _, tc := range []struct {
		dist        string
		initialized bool
		want, not   []string
	}{
		{"k3s", true, []string{"--server=https://cp.example.com:6443", render.K3sTokenPath}, []string{"--cluster-init"}},
		{"k3s", false, []string{"--cluster-init"}, []string{"--server="}},
		{"k0s", true, []string{"--token-file=" + render.K0sTokenPath}, nil},
		{"k0s", false, nil, []string{"--token-file"}},
	} {
		t.Run(fmt.Sprintf("%s initialized=%v", tc.dist, tc.initialized), func(t *testing.T) {
			data := mustRun(t, docs(
				config("cp-1", "control-plane", tc.dist, ""),
				cluster("demo", "cp.example.com", tc.initialized),
				clusterSecrets(t, "demo", true),
			), preview.Options{})
			assertContains(t, data, tc.want...)
			assertNotContains(t, data, tc.not...)
			// A control plane gets the cluster's CA, except a joining k0s controller, which
			// receives it from the k0s join API (see render's k0sController).
			if tc.dist == "k0s" && tc.initialized {
				assertNotContains(t, data, caPath[tc.dist])
				return
			}
			if got := fileContent(t, data, caPath[tc.dist]); got != string(testMaterial(t).certs["ca"].Cert) {
				t.Errorf("%s is not the input's CA:\n%s", caPath[tc.dist], got)
			}
		})
	}
}

func TestInvalidObjectReturnsTheWebhookError(t *testing.T) {
	input := config("bad", "worker", "k0s", "  singleNode: true\n  files:\n    - path: relative\n      content: x\n")
	_, err := run(t, input, preview.Options{})
	if err == nil {
		t.Fatal("an invalid KairosConfig rendered")
	}

	// The same object through the admission webhook.
	obj := &bootstrapv1.KairosConfig{}
	if err := yaml.UnmarshalStrict([]byte(input), obj); err != nil {
		t.Fatal(err)
	}
	wh := &webhooks.KairosConfig{}
	if err := wh.Default(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	_, want := wh.ValidateCreate(context.Background(), obj)
	if want == nil {
		t.Fatal("the webhook accepts the object")
	}
	if err.Error() != want.Error() {
		t.Fatalf("preview error differs from the webhook's:\n got  %s\n want %s", err, want)
	}
	for _, s := range []string{`KairosConfig.bootstrap.cluster.x-k8s.io "bad" is invalid`, "spec.singleNode", "spec.files[0].path"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestMissingReferencedSecret(t *testing.T) {
	input := docs(
		config("worker-0", "worker", "k3s", "  files:\n    - path: /etc/x\n      contentFrom:\n        name: absent-secret\n"),
		cluster("demo", "api.example.com", false),
		clusterSecrets(t, "demo", true),
	)
	_, err := run(t, input, preview.Options{})
	if err == nil {
		t.Fatal("rendered without the referenced Secret")
	}
	for _, s := range []string{bootstrapv1.WaitingForReferencedSecretReason, "absent-secret"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestMissingSecretKey(t *testing.T) {
	input := docs(
		config("worker-0", "worker", "k3s", "  files:\n    - path: /etc/x\n      contentFrom:\n        name: present\n        key: absent-key\n"),
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: present\nstringData:\n  other: x\n",
		cluster("demo", "api.example.com", false),
		clusterSecrets(t, "demo", true),
	)
	_, err := run(t, input, preview.Options{})
	if err == nil || !strings.Contains(err.Error(), bootstrapv1.WaitingForReferencedSecretReason) || !strings.Contains(err.Error(), `"absent-key"`) {
		t.Fatalf("error = %v, want a wait naming the missing key", err)
	}
}

func TestInputErrors(t *testing.T) {
	kc := config("cp-0", "control-plane", "k0s", "")
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{"empty input", "", []string{"the input holds no KairosConfig"}},
		{"only a Cluster", cluster("demo", "x.example.com", false), []string{"the input holds no KairosConfig"}},
		{"two KairosConfigs", docs(kc, config("cp-1", "control-plane", "k0s", "")), []string{"document 2", "a second KairosConfig", "exactly one"}},
		{"two Clusters", docs(kc, cluster("a", "a.example.com", false), cluster("b", "b.example.com", false)), []string{"document 3", "a second Cluster"}},
		{"unsupported kind", docs(kc, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), []string{"document 2", "ConfigMap is not supported", "give a KairosConfig, its Cluster and Secrets"}},
		{"unknown field", strings.Replace(kc, "  role:", "  rolle: worker\n  role:", 1), []string{"document 1", "rolle"}},
		{"not YAML", "apiVersion: [", []string{"document 1"}},
		{"version missing", strings.Replace(kc, "  kubernetesVersion: v1.31.2\n", "", 1), []string{"spec.kubernetesVersion is empty", "-kubernetes-version"}},
		{"Cluster without endpoint", docs(kc, "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: demo\n"),
			[]string{"cluster demo has no spec.controlPlaneEndpoint"}},
		{"paused Cluster", docs(kc, strings.Replace(cluster("demo", "x.example.com", false), "spec:\n", "spec:\n  paused: true\n", 1), clusterSecrets(t, "demo", false)),
			[]string{"reconciliation is paused"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.input, preview.Options{})
			if err == nil {
				t.Fatal("Render succeeded")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestKubernetesVersionOption(t *testing.T) {
	noVersion := strings.Replace(config("cp-0", "control-plane", "k3s", ""), "  kubernetesVersion: v1.31.2\n", "", 1)
	data := mustRun(t, docs(noVersion, cluster("demo", "x.example.com", false), clusterSecrets(t, "demo", true)),
		preview.Options{KubernetesVersion: "v1.30.4+k3s1"})
	assertContains(t, data, "want=v1.30.4+k3s1")

	// The option stands in for the Machine's version: the spec's own must agree with it.
	_, err := run(t, docs(config("cp-0", "control-plane", "k3s", ""), cluster("demo", "x.example.com", false), clusterSecrets(t, "demo", true)),
		preview.Options{KubernetesVersion: "v1.30.4"})
	if err == nil || !strings.Contains(err.Error(), bootstrapv1.InvalidConfigurationReason) || !strings.Contains(err.Error(), "v1.30.4") {
		t.Fatalf("error = %v, want the version mismatch", err)
	}
}

func TestWarnings(t *testing.T) {
	defaultPassword := strings.Replace(config("cp-0", "control-plane", "k0s", ""), "  userPassword: not-the-default\n", "", 1)
	input := docs(defaultPassword, cluster("demo", "x.example.com", false), clusterSecrets(t, "demo", false))
	res, err := run(t, input, preview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "development password") || !strings.Contains(res.Warnings[0], "spec.userPassword") {
		t.Fatalf("warnings = %q, want the default-password warning", res.Warnings)
	}
	assertContains(t, res.Data, "passwd: kairos")

	// Warnings come back with an error too.
	invalid := strings.Replace(defaultPassword, "  role: control-plane\n", "  role: control-plane\n  hostname: Bad_Host\n", 1)
	res, err = run(t, invalid, preview.Options{})
	if err == nil {
		t.Fatal("an invalid object rendered")
	}
	if res == nil || len(res.Warnings) != 1 {
		t.Fatalf("result = %+v, want the warning alongside the error", res)
	}

	res, err = run(t, docs(config("cp-0", "control-plane", "k0s", ""), cluster("demo", "x.example.com", false), clusterSecrets(t, "demo", false)), preview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 {
		t.Fatalf("warnings = %q, want none", res.Warnings)
	}
}

func TestNamespaceIsAlignedWithTheConfig(t *testing.T) {
	// A Secret written with another namespace is still found: the preview works in the
	// KairosConfig's namespace.
	worker := strings.Replace(config("w", "worker", "k3s", ""), "  name: w\n", "  name: w\n  namespace: team-a\n", 1)
	worker = strings.Replace(worker, "  userPassword: not-the-default\n", "  userPasswordSecretRef:\n    name: pw\n", 1)
	input := docs(worker,
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: pw\n  namespace: elsewhere\nstringData:\n  value: namespaced-password\n",
		strings.Replace(cluster("demo", "x.example.com", false), "  name: demo\n", "  name: demo\n  namespace: other\n", 1),
		clusterSecrets(t, "demo", true))
	data := mustRun(t, input, preview.Options{})
	assertContains(t, data, "namespaced-password", "--server=https://x.example.com:6443")
}

func TestTemplatesAreEscaped(t *testing.T) {
	// Text from the spec reaches the node literally: yip templates in commands are escaped.
	data := mustRun(t, docs(config("w", "worker", "k3s", "  preCommands:\n    - echo \"{{ not a template }}\"\n"),
		cluster("demo", "x.example.com", false), clusterSecrets(t, "demo", true)), preview.Options{})
	assertContains(t, data, `{{"{{"}} not a template }}`)
}
