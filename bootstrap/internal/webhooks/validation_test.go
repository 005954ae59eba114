package webhooks

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// TestWebhooksRefuseInTheSameWords: the spec validation moved from the bootstrap API package
// to common/provider/validation (issue 19). Through both webhooks, each rule of every part of
// it still refuses at its field with the words it had in the API package (written out here,
// not taken from the validation package, so that a changed message fails).
func TestWebhooksRefuseInTheSameWords(t *testing.T) {
	cases := []struct {
		name   string
		spec   bootstrapv1.KairosConfigSpec
		mutate func(*bootstrapv1.KairosConfigSpec)
		field  string // under the spec
		typ    metav1.CauseType
		detail string // the end of the cause's message
	}{
		{"unknown role", controlPlane(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.Role = "master" },
			"role", metav1.CauseTypeFieldValueNotSupported, `supported values: "control-plane", "worker"`},
		{"Kubernetes version", controlPlane(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "1.31" },
			"kubernetesVersion", metav1.CauseTypeFieldValueInvalid, "must be a semantic version with a leading v, for example v1.31.2"},
		{"single-node worker", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.SingleNode = true },
			"singleNode", metav1.CauseTypeForbidden, "only control-plane nodes can be single-node: remove singleNode or set role: control-plane"},
		{"user name", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "Root" },
			"userName", metav1.CauseTypeFieldValueInvalid, "must be a Linux user name: lower case letters, digits, _ or -, starting with a letter or _, at most 32 characters"},
		{"password twice", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
		}, "userPassword", metav1.CauseTypeForbidden, "userPassword and userPasswordSecretRef are mutually exclusive: keep only userPasswordSecretRef"},
		{"GitHub user", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "github:me" },
			"githubUser", metav1.CauseTypeFieldValueInvalid, "must be a GitHub user name (letters, digits and single hyphens, at most 39 characters), without the github: prefix"},
		{"SSH key type", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "ssh-dss AAAA me@host" },
			"sshPublicKey", metav1.CauseTypeFieldValueInvalid, `unsupported key type "ssh-dss": use one of ssh-rsa, ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com`},
		{"worker token on a control plane", controlPlane(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
		}, "workerTokenSecretRef", metav1.CauseTypeForbidden, "only workers use a worker token: remove it (control-plane credentials are generated)"},
		{"k3s token format", worker(bootstrapv1.DistributionK3s), func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = "K10abc::server:x" },
			"workerToken", metav1.CauseTypeFieldValueInvalid, "is not a k3s secure agent token (K10<sha256 of the server CA>::node:<password>, as in /var/lib/rancher/k3s/server/agent-token), which lets the node verify the server: copy it from a server, or leave it empty to use the cluster's agent token"},
		{"manifests on a worker", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "kind: ConfigMap"}}
		}, "manifests", metav1.CauseTypeForbidden, "manifests are applied by the control plane: move them to the control-plane KairosConfig (or KairosControlPlane)"},
		{"manifest name", controlPlane(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "dir/a.json", Content: "kind: ConfigMap"}}
		}, "manifests[0].name", metav1.CauseTypeFieldValueInvalid, "must be a lower-case file name ending in .yaml or .yml, without directories, for example cni.yaml"},
		{"file without content", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd"}}
		}, "files[0].content", metav1.CauseTypeFieldValueRequired, "set content, or contentFrom to read it from a Secret"},
		{"file owner", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "hi", Owner: "root:1000"}}
		}, "files[0].owner", metav1.CauseTypeFieldValueInvalid, `must be "user:group", for example root:root or 1000:1000 (both names or both numeric ids)`},
		{"hostname and prefix", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Hostname, s.HostnamePrefix = "node", "node-"
		}, "hostnamePrefix", metav1.CauseTypeForbidden, "hostname and hostnamePrefix are mutually exclusive: a template shared by many Machines should use hostnamePrefix only"},
		{"install that stays in the live system", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Reboot: ptr.To(false)}
		}, "install.reboot", metav1.CauseTypeFieldValueInvalid, "the machine would stay in the live installer, where the node never bootstraps: remove reboot: false (it defaults to true), or set poweroff if the infrastructure boots the machine again"},
		{"install device", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Device: "sda"}
		}, "install.device", metav1.CauseTypeFieldValueInvalid, "must be auto or a device path such as /dev/sda or /dev/disk/by-id/..."},
		{"k3s options on k0s", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		}, "k3s", metav1.CauseTypeForbidden, "k3s options do not apply to distribution k0s: move them to spec.k0s or set distribution: k3s"},
		{"environment variable name", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Env: map[string]string{"1A": "x"}}
		}, "k0s.env[1A]", metav1.CauseTypeFieldValueInvalid, "must be an environment variable name: letters, digits and _, not starting with a digit"},
		{"k0s config on a worker", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Config: "spec: {}"}
		}, "k0s.config", metav1.CauseTypeForbidden, "the k0s ClusterConfig is read by controllers only: remove it from worker configs"},
		{"fragment position", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: b", Position: "middle"}}
		}, "cloudConfigFragments[0].position", metav1.CauseTypeFieldValueNotSupported, `supported values: "append", "prepend"`},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := *tc.spec.DeepCopy()
			tc.mutate(&spec)
			_, errC := (&KairosConfig{}).ValidateCreate(ctx, kairosConfig(spec))
			_, errT := (&KairosConfigTemplate{}).ValidateCreate(ctx, &bootstrapv1.KairosConfigTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "t"},
				Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: spec}},
			})
			for fieldPath, err := range map[string]error{"spec." + tc.field: errC, "spec.template.spec." + tc.field: errT} {
				if err == nil {
					t.Errorf("%s: accepted", fieldPath)
					continue
				}
				found := false
				for _, c := range statusCauses(t, err) {
					found = found || (c.Field == fieldPath && c.Type == tc.typ && strings.HasSuffix(c.Message, tc.detail))
				}
				if !found {
					t.Errorf("no %s cause at %s ending in %q:\n%v", tc.typ, fieldPath, tc.detail, err)
				}
			}
		})
	}

	// The rule of shared specs (templates, a control plane's kairosConfigSpec).
	_, err := (&KairosConfigTemplate{}).ValidateCreate(ctx, &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "t"},
		Spec: bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{
			Spec: func() bootstrapv1.KairosConfigSpec {
				s := worker(bootstrapv1.DistributionK0s)
				s.Hostname = "node-1"
				return s
			}(),
		}},
	})
	if err == nil || !hasCause(statusCauses(t, err), "spec.template.spec.hostname", metav1.CauseTypeForbidden,
		`every Machine created from this template would be named "node-1": leave it empty so that each node is named after its Machine (or use hostnamePrefix, with providerID.source Distribution)`) {
		t.Errorf("literal hostname in a template: %v", err)
	}
}
