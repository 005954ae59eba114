package bootstrap_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/dryrun"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// celCases break one cross-field rule each that the KairosConfig CRDs hold as CEL rules
// (x-kubernetes-validations), so that an API server refuses them even when the admission
// webhook is down or not installed. field is the path under the spec; want is what the
// message says (the webhook's words). They are refused with the webhook too: most are in
// invalidCases, and TestCELRulesWithoutWebhooks checks that the webhook's own validation
// refuses each with the same words.
var celCases = []struct {
	name   string
	mutate func(*bootstrapv1.KairosConfigSpec)
	field  string
	want   string
}{
	{"password twice", func(s *bootstrapv1.KairosConfigSpec) { s.UserPasswordSecretRef = ref("pw", "") },
		"userPassword", "userPassword and userPasswordSecretRef are mutually exclusive: keep only userPasswordSecretRef"},
	{"worker token twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role, s.Distribution = bootstrapv1.RoleWorker, bootstrapv1.DistributionK3s
		s.WorkerToken, s.WorkerTokenSecretRef = "K10abc::server:x", ref("tok", "")
	}, "workerToken", "workerToken and workerTokenSecretRef are mutually exclusive: keep only workerTokenSecretRef"},
	{"hostname and prefix", func(s *bootstrapv1.KairosConfigSpec) { s.Hostname, s.HostnamePrefix = "node", "node-" },
		"hostnamePrefix", "hostname and hostnamePrefix are mutually exclusive"},
	{"manifest content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: b", ContentFrom: ref("m", "")}}
	}, "manifests[0].contentFrom", "content and contentFrom are mutually exclusive: keep one"},
	{"manifest without content", func(s *bootstrapv1.KairosConfigSpec) { s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml"}} },
		"manifests[0].content", "set content, or contentFrom to read it from a Secret"},
	{"file content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "hi", ContentFrom: ref("f", "")}}
	}, "files[0].contentFrom", "content and contentFrom are mutually exclusive"},
	{"file without content", func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "/etc/motd"}} },
		"files[0].content", "set content, or contentFrom"},
	{"fragment content twice", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: b", ContentFrom: ref("f", "")}}
	}, "cloudConfigFragments[0].contentFrom", "keep one"},
	{"fragment without content", func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f"}}
	}, "cloudConfigFragments[0].content", "set content, or contentFrom"},
	{"install reboot and poweroff", func(s *bootstrapv1.KairosConfigSpec) {
		s.Install = &bootstrapv1.Install{Reboot: ptr.To(true), Poweroff: true}
	}, "install.poweroff", "reboot and poweroff are mutually exclusive: keep reboot"},
	{"install that stays in the live system", func(s *bootstrapv1.KairosConfigSpec) { s.Install = &bootstrapv1.Install{Reboot: ptr.To(false)} },
		"install.reboot", "the machine would stay in the live installer"},
	{"single-node worker", func(s *bootstrapv1.KairosConfigSpec) { s.Role, s.SingleNode = bootstrapv1.RoleWorker, true },
		"singleNode", "only control-plane nodes can be single-node: remove singleNode or set role: control-plane"},
	{"single-node without a role (a worker)", func(s *bootstrapv1.KairosConfigSpec) { s.Role, s.SingleNode = "", true },
		"singleNode", "set role: control-plane"},
	{"worker token on a control plane", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution, s.WorkerToken = bootstrapv1.DistributionK3s, "K10abc::server:x"
	}, "workerToken", "only workers use a worker token"},
	{"worker token ref on a control plane", func(s *bootstrapv1.KairosConfigSpec) { s.WorkerTokenSecretRef = ref("tok", "") },
		"workerTokenSecretRef", "only workers use a worker token"},
	{"manifests without a role (a worker)", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role = ""
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "kind: ConfigMap"}}
	}, "manifests", "manifests are applied by the control plane"},
	{"k0s config on a worker", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role, s.K0s = bootstrapv1.RoleWorker, &bootstrapv1.DistributionOptions{Config: "spec: {}"}
	}, "k0s.config", "the k0s ClusterConfig is read by controllers only: remove it from worker configs"},
	{"virtual IP on a worker", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role, s.VirtualIP = bootstrapv1.RoleWorker, &bootstrapv1.VirtualIP{Address: "192.0.2.10"}
	}, "virtualIP", "only control-plane nodes hold the virtual IP"},
	{"k0s options on k3s", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution, s.K0s = bootstrapv1.DistributionK3s, &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, "k0s", "k0s options do not apply to distribution k3s: move them to spec.k3s or set distribution: k0s"},
	{"k3s options without a distribution (k0s)", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution, s.K3s = "", &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, "k3s", "k3s options do not apply to distribution k0s: move them to spec.k0s or set distribution: k3s"},
}

// celAccepted are specs the rules must not refuse: an unset role or distribution is read as
// its default (worker, k0s), as the webhook defaults it.
var celAccepted = []struct {
	name   string
	mutate func(*bootstrapv1.KairosConfigSpec)
}{
	{"the base", func(*bootstrapv1.KairosConfigSpec) {}},
	{"worker token without a role (a worker)", func(s *bootstrapv1.KairosConfigSpec) {
		s.Role, s.Distribution, s.WorkerTokenSecretRef = "", bootstrapv1.DistributionK3s, ref("tok", "")
	}},
	{"k0s options without a distribution (k0s)", func(s *bootstrapv1.KairosConfigSpec) {
		s.Distribution, s.K0s = "", &bootstrapv1.DistributionOptions{Config: "spec: {}"}
	}},
	{"control-plane settings", func(s *bootstrapv1.KairosConfigSpec) {
		s.SingleNode, s.VirtualIP = true, &bootstrapv1.VirtualIP{Address: "192.0.2.10"}
		s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", ContentFrom: ref("m", "")}}
	}},
	{"install powering off", func(s *bootstrapv1.KairosConfigSpec) {
		s.Install = &bootstrapv1.Install{Reboot: ptr.To(false), Poweroff: true}
	}},
	{"password from a Secret", func(s *bootstrapv1.KairosConfigSpec) { s.UserPassword, s.UserPasswordSecretRef = "", ref("pw", "") }},
}

// TestCELRulesWithoutWebhooks creates the objects on an API server with the KairosConfig CRDs
// and no webhooks at all (nothing defaults or validates them but the CRD schema): each case is
// refused by its CEL rule, at its field and in the webhook's words, for KairosConfigs and
// KairosConfigTemplates, and the webhook's own validation refuses it the same way.
func TestCELRulesWithoutWebhooks(t *testing.T) {
	env := framework.StartSchemaOnly(t, "bootstrap", "KairosConfig", mgmt.Scheme)
	ns := framework.NewNamespace(t, env.Client, "cel-")
	ctx := framework.Context(t)

	create := func(name string, spec bootstrapv1.KairosConfigSpec) (config, template error) {
		config = env.Client.Create(ctx, &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec})
		template = env.Client.Create(ctx, &bootstrapv1.KairosConfigTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: spec}},
		})
		return config, template
	}

	for i, tc := range celAccepted {
		t.Run("accepted/"+tc.name, func(t *testing.T) {
			spec := validControlPlane()
			tc.mutate(&spec)
			if errC, errT := create(fmt.Sprintf("accepted-%02d", i), spec); errC != nil || errT != nil {
				t.Fatalf("refused without webhooks: %v / %v", errC, errT)
			}
		})
	}

	for i, tc := range celCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validControlPlane()
			tc.mutate(&spec)
			errC, errT := create(fmt.Sprintf("refused-%02d", i), spec)
			framework.ExpectRefusedAt(t, tc.want, map[string]error{"spec." + tc.field: errC, "spec.template.spec." + tc.field: errT})

			// The webhook refuses the same spec at the same field in the same words: its spec
			// validation, then (only when that passes) its dry render.
			defaulted := spec.DeepCopy()
			defaulted.Default()
			errs := validation.ValidateKairosConfigSpec(defaulted, field.NewPath("spec"))
			if len(errs) == 0 {
				errs = dryrun.Render(defaulted, field.NewPath("spec"))
			}
			framework.ExpectFieldError(t, errs, "spec."+tc.field, tc.want)
		})
	}
}
