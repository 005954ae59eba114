package controlplane_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/validation"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// celCases break one cross-field rule each that the KairosControlPlane CRDs hold as CEL rules:
// the fields of kairosConfigSpec the control plane sets itself, options of the other
// distribution (an unset spec.distribution is k0s), and the KairosConfigSpec rules that hold
// wherever the spec is embedded. field is the path under the spec; want is the webhook's words.
var celCases = []struct {
	name   string
	mutate func(*cpSpec)
	field  string
	want   string
}{
	{"embedded role worker", func(s *cpSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleWorker },
		"kairosConfigSpec.role", "control-plane Machines have role control-plane: remove it"},
	{"embedded distribution", func(s *cpSpec) { s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s },
		"kairosConfigSpec.distribution", "differs from spec.distribution k0s: remove it"},
	{"embedded distribution differs from k3s", func(s *cpSpec) {
		s.Distribution, s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s, bootstrapv1.DistributionK0s
	}, "kairosConfigSpec.distribution", "differs from spec.distribution k3s"},
	{"embedded singleNode", func(s *cpSpec) { s.KairosConfigSpec.SingleNode = true },
		"kairosConfigSpec.singleNode", "the control plane sets single-node mode itself when replicas is 1: remove it"},
	{"embedded kubernetesVersion", func(s *cpSpec) { s.KairosConfigSpec.KubernetesVersion = "v1.31.2" },
		"kairosConfigSpec.kubernetesVersion", "spec.version applies: remove it"},
	{"embedded worker token", func(s *cpSpec) {
		s.Distribution, s.KairosConfigSpec.WorkerToken = bootstrapv1.DistributionK3s, "K10abc::server:x"
	}, "kairosConfigSpec.workerToken", "only workers use a worker token"},
	{"embedded worker token ref", func(s *cpSpec) {
		s.KairosConfigSpec.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
	}, "kairosConfigSpec.workerTokenSecretRef", "only workers use a worker token"},
	{"embedded k3s options without a distribution (k0s)", func(s *cpSpec) {
		s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, "kairosConfigSpec.k3s", "k3s options do not apply to distribution k0s: move them to spec.k0s or set distribution: k3s"},
	{"embedded k0s options on k3s", func(s *cpSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}, "kairosConfigSpec.k0s", "k0s options do not apply to distribution k3s"},
	// KairosConfigSpec's own rules, under kairosConfigSpec.
	{"embedded password twice", func(s *cpSpec) {
		s.KairosConfigSpec.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
	}, "kairosConfigSpec.userPassword", "keep only userPasswordSecretRef"},
	{"embedded hostname and prefix", func(s *cpSpec) {
		s.KairosConfigSpec.Hostname, s.KairosConfigSpec.HostnamePrefix = "node", "node-"
	}, "kairosConfigSpec.hostnamePrefix", "use hostnamePrefix only"},
	{"embedded file without content", func(s *cpSpec) { s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/motd"}} },
		"kairosConfigSpec.files[0].content", "set content, or contentFrom"},
	// etcd snapshots: the control plane sets kairosConfigSpec.etcdSnapshots from spec.etcd.snapshots.
	{"embedded etcd snapshots", func(s *cpSpec) { s.KairosConfigSpec.EtcdSnapshots = snapshots() },
		"kairosConfigSpec.etcdSnapshots", "the control plane sets it from spec.etcd.snapshots: move it there"},
	{"snapshot schedule of four fields", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.Schedule = "0 */12 * *" },
		"etcd.snapshots.schedule", "must be a cron expression of five fields (minute hour day-of-month month day-of-week), for example '0 */12 * * *'"},
	{"snapshot endpoint with a scheme", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.S3.Endpoint = "https://s3.example.com"
	},
		"etcd.snapshots.s3.endpoint", "endpoint is host[:port] without a scheme: snapshots always go over HTTPS (set caBundle for a private CA)"},
	{"snapshot endpoint with a path", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.S3.Endpoint = "s3.example.com/backups"
	},
		"etcd.snapshots.s3.endpoint", "endpoint is host[:port] without a path: put the folder in prefix"},
	{"snapshot bucket name", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.S3.Bucket = "Site_Backups" },
		"etcd.snapshots.s3.bucket", "must be an S3 bucket name"},
	{"snapshot prefix with a leading slash", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.S3.Prefix = "/edge" },
		"etcd.snapshots.s3.prefix", "without a leading or trailing '/'"},
	{"snapshot region", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.S3.Region = "EU West" },
		"etcd.snapshots.s3.region", "must be a region name of lowercase letters, digits and hyphens, for example eu-west-1"},
	{"snapshot restore", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.Restore = bootstrapv1.EtcdSnapshotRestoreNewest
	},
		"etcd.snapshots.restore", "the control plane sets restore itself, on the replacement of its last Machine: remove it"},
	{"snapshot CA that is not PEM", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.S3.CABundle = "MIIC..." },
		"etcd.snapshots.s3.caBundle", "must hold PEM certificates (-----BEGIN CERTIFICATE-----)"},
}

// snapshots are valid etcd snapshot settings.
func snapshots() *bootstrapv1.EtcdSnapshots {
	return &bootstrapv1.EtcdSnapshots{S3: bootstrapv1.EtcdSnapshotS3{
		Endpoint: "s3.example.com:9000", Bucket: "site-backups", Prefix: "edge/eu",
		CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
	}}
}

// celAccepted must pass the rules: what a control-plane Machine may have.
var celAccepted = []struct {
	name   string
	mutate func(*cpSpec)
}{
	{"the base", func(*cpSpec) {}},
	{"embedded role control-plane and the same distribution", func(s *cpSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.KairosConfigSpec.Role, s.KairosConfigSpec.Distribution = bootstrapv1.RoleControlPlane, bootstrapv1.DistributionK3s
		s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
	}},
	{"embedded control-plane settings without a role", func(s *cpSpec) {
		s.KairosConfigSpec.Manifests = []bootstrapv1.Manifest{{Name: "cni.yaml", Content: "kind: ConfigMap"}}
		s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Config: "spec: {}"}
		s.KairosConfigSpec.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10"}
	}},
	{"etcd snapshots", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.Schedule, s.Etcd.Snapshots.S3.Region = "30 2 * * 1-5", "eu-west-1"
	}},
	{"a config template instead", func(s *cpSpec) {
		s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
		s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
	}},
}

// TestCELRulesWithoutWebhooks creates KairosControlPlanes and KairosControlPlaneTemplates on
// an API server with the control plane's CRDs and no webhooks: each case is refused by its CEL
// rule at its field in the webhook's words, and the spec validation the webhook runs refuses it
// the same way.
func TestCELRulesWithoutWebhooks(t *testing.T) {
	env := framework.StartSchemaOnly(t, "controlplane", "KairosControlPlane", mgmt.Scheme)
	ns := framework.NewNamespace(t, env.Client, "cel-")
	ctx := framework.Context(t)

	create := func(name string, spec cpSpec) (controlPlane, template error) {
		controlPlane = env.Client.Create(ctx, kcp(ns, name, spec))
		template = env.Client.Create(ctx, &controlplanev1.KairosControlPlaneTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: controlplanev1.KairosControlPlaneTemplateSpec{Template: controlplanev1.KairosControlPlaneTemplateResource{
				Spec: controlplanev1.KairosControlPlaneTemplateResourceSpec{
					Distribution: spec.Distribution, KairosConfigSpec: spec.KairosConfigSpec, KairosConfigTemplate: spec.KairosConfigTemplate,
					Etcd: spec.Etcd,
				},
			}},
		})
		return controlPlane, template
	}

	for i, tc := range celAccepted {
		t.Run("accepted/"+tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(&spec)
			if errK, errT := create(fmt.Sprintf("accepted-%02d", i), spec); errK != nil || errT != nil {
				t.Fatalf("refused without webhooks: %v / %v", errK, errT)
			}
		})
	}

	for i, tc := range celCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(&spec)
			errK, errT := create(fmt.Sprintf("refused-%02d", i), spec)
			framework.ExpectRefusedAt(t, tc.want, map[string]error{"spec." + tc.field: errK, "spec.template.spec." + tc.field: errT})

			// The webhook's spec validation refuses it at the same field in the same words.
			defaulted := spec.DeepCopy()
			defaulted.Default()
			framework.ExpectFieldError(t, validation.ValidateKairosControlPlaneSpec(defaulted, field.NewPath("spec")), "spec."+tc.field, tc.want)
		})
	}
}
