package bootstrap_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// validControlPlane is a spec every invalid case below breaks in exactly one way.
func validControlPlane() bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{
		Role:              bootstrapv1.RoleControlPlane,
		Distribution:      bootstrapv1.DistributionK0s,
		KubernetesVersion: "v1.31.2",
		UserPassword:      "s3cret",
	}
}

func ref(name, key string) *bootstrapv1.SecretKeyReference {
	return &bootstrapv1.SecretKeyReference{Name: name, Key: key}
}

// invalidCases each break a valid spec once; want are substrings the rejection must contain:
// the field path and the fix. The API server refuses the cross-field cases with the CRDs' CEL
// rules before the webhook sees them, in the webhook's words (TestCELRulesWithoutWebhooks).
var invalidCases = []struct {
	name   string
	mutate func(*bootstrapv1.KairosConfigSpec)
	want   []string
}{
	{"unknown role", func(s *bootstrapv1.KairosConfigSpec) { s.Role = "master" }, []string{"spec.role", `"control-plane"`, `"worker"`}},
	{"unknown distribution", func(s *bootstrapv1.KairosConfigSpec) { s.Distribution = "rke2" }, []string{"spec.distribution", `"k0s"`, `"k3s"`}},
	{"version without v", func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "1.31.2" }, []string{"spec.kubernetesVersion", "leading v, for example v1.31.2"}},
	{"version without patch", func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.31" }, []string{"spec.kubernetesVersion", "semantic version"}},
	{"single-node worker", func(s *bootstrapv1.KairosConfigSpec) { s.Role = bootstrapv1.RoleWorker; s.SingleNode = true }, []string{"spec.singleNode", "set role: control-plane"}},
	{"user name with space", func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "Root User" }, []string{"spec.userName", "Linux user name"}},
	{"user name starting with digit", func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "1kairos" }, []string{"spec.userName", "starting with a letter"}},
	{"password twice", func(s *bootstrapv1.KairosConfigSpec) { s.UserPasswordSecretRef = ref("pw", "") }, []string{"spec.userPassword", "keep only userPasswordSecretRef"}},
	{"password secret name", func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = ""
		s.UserPasswordSecretRef = ref("Bad_Name", "")
	}, []string{"spec.userPasswordSecretRef.name", "name of a Secret"}},
	{"password secret key", func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = ""
		s.UserPasswordSecretRef = ref("pw", "bad key!")
	}, []string{"spec.userPasswordSecretRef.key", "key of the Secret"}},
	{"group name", func(s *bootstrapv1.KairosConfigSpec) { s.UserGroups = []string{"Admins"} }, []string{"spec.userGroups[0]", "Linux group name"}},
	{"github user with prefix", func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "github:octocat" }, []string{"spec.githubUser", "without the github: prefix"}},
	{"github user leading hyphen", func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "-octocat" }, []string{"spec.githubUser", "GitHub user name"}},
	{"ssh key garbage", func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "not-a-key" }, []string{"spec.sshPublicKey", "authorized_keys format"}},
	{"ssh key type", func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "ssh-dss AAAAB3NzaC1kc3M= me" }, []string{"spec.sshPublicKey", `unsupported key type "ssh-dss"`}},
	{"ssh key material", func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "ssh-ed25519 !!!! me" }, []string{"spec.sshPublicKey", "not valid base64"}},
	{"worker token twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.Distribution = bootstrapv1.DistributionK3s
		s.WorkerToken = "K10abc::server:x"
		s.WorkerTokenSecretRef = ref("tok", "")
	}, []string{"spec.workerToken", "keep only workerTokenSecretRef"}},
	{"worker token on control plane", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.WorkerToken = "K10abc::server:x"
	}, []string{"spec.workerToken", "only workers use a worker token"}},
	{"worker token ref on control plane", func(s *bootstrapv1.KairosConfigSpec) { s.WorkerTokenSecretRef = ref("tok", "") }, []string{"spec.workerTokenSecretRef", "only workers use a worker token"}},
	{"k0s worker token format", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.WorkerToken = "abcdef.0123456789abcdef"
	}, []string{"spec.workerToken", "k0s token create --role=worker", "<redacted>"}},
	{"k3s worker token format", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.Distribution = bootstrapv1.DistributionK3s
		s.WorkerToken = "my-plain-token"
	}, []string{"spec.workerToken", "k3s secure agent token", "<redacted>"}},
	{"manifests on a worker", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "kind: ConfigMap"}}
	}, []string{"spec.manifests", "move them to the control-plane"}},
	{"manifest name with directory", func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "../passwd.yaml", Content: "a: b"}}
	}, []string{"spec.manifests[0].name", "without directories"}},
	{"manifest name without extension", func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "cni", Content: "a: b"}}
	}, []string{"spec.manifests[0].name", "ending in .yaml"}},
	{"manifest content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: b", ContentFrom: ref("m", "")}}
	}, []string{"spec.manifests[0].contentFrom", "keep one"}},
	{"manifest without content", func(s *bootstrapv1.KairosConfigSpec) { s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml"}} }, []string{"spec.manifests[0].content", "contentFrom to read it from a Secret"}},
	{"manifest not YAML", func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: [b"}}
	}, []string{"spec.manifests[0].content", "not valid YAML"}},
	{"relative file path", func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "etc/motd", Content: "hi"}} }, []string{"spec.files[0].path", "absolute, clean file path"}},
	{"unclean file path", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/../motd", Content: "hi"}}
	}, []string{"spec.files[0].path", "absolute, clean"}},
	{"file owner", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Owner: "root", Content: "hi"}}
	}, []string{"spec.files[0].owner", `"user:group"`}},
	{"file permissions symbolic", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Permissions: "rw-r", Content: "hi"}}
	}, []string{"spec.files[0].permissions", `"0644"`}},
	{"file permissions not octal", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Permissions: "0999", Content: "hi"}}
	}, []string{"spec.files[0].permissions", "octal"}},
	{"file content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "hi", ContentFrom: ref("f", "")}}
	}, []string{"spec.files[0].contentFrom", "mutually exclusive"}},
	{"file without content", func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "/etc/motd"}} }, []string{"spec.files[0].content", "set content"}},
	{"file path twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "a"}, {Path: "/etc/motd", Content: "b"}}
	}, []string{"spec.files[1]", "Duplicate value"}},
	{"hostname and prefix", func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "node"; s.HostnamePrefix = "node-" }, []string{"spec.hostnamePrefix", "use hostnamePrefix only"}},
	{"hostname not DNS", func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "Bad_Host" }, []string{"spec.hostname", "RFC 1123"}},
	{"virtual IP on a worker", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role, s.VirtualIP = bootstrapv1.RoleWorker, &bootstrapv1.VirtualIP{Address: "192.0.2.10"}
	}, []string{"spec.virtualIP", "only control-plane nodes hold the virtual IP"}},
	{"virtual IP prefix too long", func(s *bootstrapv1.KairosConfigSpec) {
		s.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10", PrefixLength: 64}
	}, []string{"spec.virtualIP.prefixLength", "(1-32)"}},
	{"hostname prefix not DNS", func(s *bootstrapv1.KairosConfigSpec) { s.HostnamePrefix = "bad_" }, []string{"spec.hostnamePrefix", "RFC 1123"}},
	{"hostname prefix with provider IDs from the Machine", func(s *bootstrapv1.KairosConfigSpec) { s.HostnamePrefix = "node-" },
		[]string{"spec.hostnamePrefix", "named after its Machine", "set providerID.source to Distribution"}},
	{"unknown provider ID source", func(s *bootstrapv1.KairosConfigSpec) { s.ProviderID.Source = "Cloud" },
		[]string{"spec.providerID.source", "Unsupported value", "Machine", "Distribution"}},
	{"install reboot and poweroff", func(s *bootstrapv1.KairosConfigSpec) {
		s.Install = &bootstrapv1.Install{Reboot: ptr.To(true), Poweroff: true}
	}, []string{"spec.install.poweroff", "keep reboot"}},
	{"install device", func(s *bootstrapv1.KairosConfigSpec) { s.Install = &bootstrapv1.Install{Device: "sda"} }, []string{"spec.install.device", "/dev/sda"}},
	{"k0s options on k3s", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, []string{"spec.k0s", "move them to spec.k3s"}},
	{"k3s options on k0s", func(s *bootstrapv1.KairosConfigSpec) {
		s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, []string{"spec.k3s", "set distribution: k3s"}},
	{"k0s --single", func(s *bootstrapv1.KairosConfigSpec) {
		s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--single"}}
	}, []string{"spec.k0s.args[0]", "singleNode on a KairosConfig"}},
	{"k0s --token-file", func(s *bootstrapv1.KairosConfigSpec) {
		s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--token-file=/x"}}
	}, []string{"spec.k0s.args[0]", "workerTokenSecretRef"}},
	{"k3s --cluster-init", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--cluster-init"}}
	}, []string{"spec.k3s.args[0]", "--cluster-init is managed by kairos-capi"}},
	{"k0s env name", func(s *bootstrapv1.KairosConfigSpec) {
		s.K0s = &bootstrapv1.DistributionOptions{Env: map[string]string{"1BAD": "x"}}
	}, []string{"spec.k0s.env[1BAD]", "environment variable name"}},
	{"k0s config not a map", func(s *bootstrapv1.KairosConfigSpec) { s.K0s = &bootstrapv1.DistributionOptions{Config: "- a\n- b"} }, []string{"spec.k0s.config", "not a YAML map"}},
	{"k0s config on a worker", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.K0s = &bootstrapv1.DistributionOptions{Config: "spec: {}"}
	}, []string{"spec.k0s.config", "remove it from worker configs"}},
	{"fragment content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: b", ContentFrom: ref("f", "")}}
	}, []string{"spec.cloudConfigFragments[0].contentFrom", "keep one"}},
	{"fragment not YAML", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: [b"}}
	}, []string{"spec.cloudConfigFragments[0].content", `fragment "f"`, "is not valid YAML"}},
	{"fragment with p2p", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "net", Content: "p2p:\n  network_token: x"}}
	}, []string{"spec.cloudConfigFragments[0].content", `fragment "net"`, "p2p: may not be set by a fragment", "Cluster API owning them"}},
	{"fragment with k0s block", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "x", Content: "k0s:\n  enabled: true"}}
	}, []string{"spec.cloudConfigFragments[0].content", "the k0s block is generated"}},
	{"fragment with quoted stage file permissions", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "stages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: \"0644\"\n"}}
	}, []string{"spec.cloudConfigFragments[0].content", "stages.boot[0].files[0].permissions", "drops every stage"}},
	{"fragment redefining the login user", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "users:\n  - name: kairos\n"}}
	}, []string{"spec.cloudConfigFragments[0].content", `user "kairos" is already defined by the generated document`}},
	{"k0s config flag as a shorthand with a value", func(s *bootstrapv1.KairosConfigSpec) {
		s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"-c /etc/other.yaml"}}
	}, []string{"spec.k0s.args[0]", "--config is managed by kairos-capi"}},
	{"k3s server flag on an agent", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = bootstrapv1.RoleWorker
		s.Distribution = bootstrapv1.DistributionK3s
		s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--disable=traefik"}}
	}, []string{"spec.k3s.args[0]", "k3s agent refuses to start"}},
	{"k0s config with an unknown field", func(s *bootstrapv1.KairosConfigSpec) {
		s.K0s = &bootstrapv1.DistributionOptions{Config: "spec:\n  network:\n    podCidr: 10.0.0.0/16\n"}
	}, []string{"spec.k0s.config", "spec.network.podCidr: is not a ClusterConfig field"}},
	{"install that stays in the live system", func(s *bootstrapv1.KairosConfigSpec) {
		s.Install = &bootstrapv1.Install{Reboot: ptr.To(false)}
	}, []string{"spec.install.reboot", "stay in the live installer"}},
	{"fragment position", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "x", Position: "middle", Content: "a: b"}}
	}, []string{"spec.cloudConfigFragments[0].position", `"append"`, `"prepend"`}},
	{"fragment conflicting with the generated document", func(s *bootstrapv1.KairosConfigSpec) {
		s.Hostname = "node-1"
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "host", Content: "hostname: other"}}
	}, []string{"spec", "hostname", `"host"`}},
}

func TestInvalidKairosConfigsAreRejected(t *testing.T) {
	if len(invalidCases) < 40 {
		t.Fatalf("the table must hold at least 40 cases, has %d", len(invalidCases))
	}
	ns := newNamespace(t)
	ctx := framework.Context(t)
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validControlPlane()
			tc.mutate(&spec)
			obj := &bootstrapv1.KairosConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "invalid-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"), Namespace: ns},
				Spec:       spec,
			}
			if len(obj.Name) > 63 {
				obj.Name = obj.Name[:63]
			}
			err := mgmt.Client.Create(ctx, obj)
			if err == nil {
				t.Fatalf("case %d accepted", i)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("rejection does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	// The same spec rules apply to templates, under spec.template.spec.
	t.Run("template", func(t *testing.T) {
		spec := validControlPlane()
		spec.Role = "master"
		tmpl := &bootstrapv1.KairosConfigTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "bad-template", Namespace: ns},
			Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: spec}},
		}
		err := mgmt.Client.Create(ctx, tmpl)
		if err == nil || !strings.Contains(err.Error(), "spec.template.spec.role") {
			t.Fatalf("invalid template: %v", err)
		}

		// Every Machine of a template would share a literal hostname.
		named := validControlPlane()
		named.Hostname = "node-1"
		tmpl = &bootstrapv1.KairosConfigTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "named-template", Namespace: ns},
			Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: named}},
		}
		err = mgmt.Client.Create(ctx, tmpl)
		if err == nil || !strings.Contains(err.Error(), "spec.template.spec.hostname") || !strings.Contains(err.Error(), "use hostnamePrefix") {
			t.Fatalf("template with a literal hostname: %v", err)
		}
	})
}

// TestDefaultsAndWarnings: what the API server returns after admission is the spec sent with
// bootstrapv1.KairosConfigSpec.Default applied (for templates, to spec.template.spec), and the
// default password draws a warning.
func TestDefaultsAndWarnings(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	c, collector := mgmt.WarningClient(t)

	obj := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns}}
	sent := *obj.Spec.DeepCopy()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "empty KairosConfig spec", sent, obj.Spec)
	if !collector.Contain("well-known development password") {
		t.Errorf("no warning for the default password: %v", collector.List())
	}

	// No password default next to a password Secret, whose key is defaulted.
	collector.Reset()
	safe := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "safe", Namespace: ns},
		Spec:       bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: ref("pw", ""), GithubUser: "octocat"},
	}
	sent = *safe.Spec.DeepCopy()
	if err := c.Create(ctx, safe); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "KairosConfig spec with a password Secret", sent, safe.Spec)
	if len(collector.List()) != 0 {
		t.Errorf("unexpected warnings: %v", collector.List())
	}

	// Templates get the same defaults under spec.template.spec.
	tmpl := &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "template-defaults", Namespace: ns},
		Spec: bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: bootstrapv1.KairosConfigSpec{
			UserPasswordSecretRef: ref("pw", ""),
			Files:                 []bootstrapv1.File{{Path: "/etc/motd", ContentFrom: ref("motd", "")}},
			Install:               &bootstrapv1.Install{},
		}}},
	}
	sent = *tmpl.Spec.Template.Spec.DeepCopy()
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "KairosConfigTemplate spec.template.spec", sent, tmpl.Spec.Template.Spec)
}

// TestTemplateImmutableExceptTopologyDryRun: templates are immutable, but the topology
// controller's server-side-apply dry runs pass.
func TestTemplateImmutableExceptTopologyDryRun(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	tmpl := &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{
			Spec: bootstrapv1.KairosConfigSpec{UserPassword: "x1", Distribution: bootstrapv1.DistributionK3s}}},
	}
	if err := mgmt.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}

	changed := tmpl.DeepCopy()
	changed.Spec.Template.Spec.PreCommands = []string{"echo hi"}
	err := mgmt.Client.Update(ctx, changed)
	if err == nil || !strings.Contains(err.Error(), "spec.template.spec") || !strings.Contains(err.Error(), "create a new template") {
		t.Fatalf("in-place template change accepted: %v", err)
	}

	dry := tmpl.DeepCopy()
	dry.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	dry.Spec.Template.Spec.PreCommands = []string{"echo hi"}
	if err := mgmt.Client.Update(ctx, dry, client.DryRunAll); err != nil {
		t.Fatalf("topology dry run refused: %v", err)
	}

	// Metadata-only changes are fine.
	meta := tmpl.DeepCopy()
	meta.Labels = map[string]string{"team": "a"}
	if err := mgmt.Client.Update(ctx, meta); err != nil {
		t.Fatalf("label change refused: %v", err)
	}
}
