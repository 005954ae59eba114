package controlplane_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// validSpec is a KairosControlPlane spec every invalid case below breaks in one way. It causes
// no warning.
func validSpec() controlplanev1.KairosControlPlaneSpec {
	return controlplanev1.KairosControlPlaneSpec{
		Replicas: ptr.To[int32](3),
		Version:  "v1.31.2",
		MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachineTemplate", Name: "cp"},
		}},
		KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"},
	}
}

func kcp(ns, name string, spec controlplanev1.KairosControlPlaneSpec) *controlplanev1.KairosControlPlane {
	return &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func surge(v intstr.IntOrString) *intstr.IntOrString { return &v }

// spec is shorthand for the embedded KairosConfigSpec of a case.
type cpSpec = controlplanev1.KairosControlPlaneSpec

// invalidControlPlanes each break validSpec once. want are substrings the rejection must
// contain: the field path and what to do. A few rules are enforced by the CRD schema before
// the webhook runs (enums, minimums, required fields, list keys); their cases expect the
// schema's wording. The cross-field rules the CRDs hold as CEL rules use the webhook's words
// (TestCELRulesWithoutWebhooks).
var invalidControlPlanes = []struct {
	name   string
	mutate func(*cpSpec)
	want   []string
}{
	// replicas and version
	{"zero replicas", func(s *cpSpec) { s.Replicas = ptr.To[int32](0) }, []string{"spec.replicas", "greater than or equal to 1"}},
	{"version without v", func(s *cpSpec) { s.Version = "1.31.2" }, []string{"spec.version", "leading v, for example v1.31.2"}},
	{"version without patch", func(s *cpSpec) { s.Version = "v1.31" }, []string{"spec.version", "semantic version"}},
	{"even replicas", func(s *cpSpec) { s.Replicas = ptr.To[int32](2) }, []string{"spec.replicas", "must be odd", "use 1 or 3"}},
	{"k0s without the EtcdMember API", func(s *cpSpec) { s.Version = "v1.29.15+k0s.0" }, []string{"spec.version", "k0s releases before v1.30.0 have no EtcdMember API", "use v1.30.0 or later"}},
	{"infrastructureRef without name", func(s *cpSpec) { s.MachineTemplate.Spec.InfrastructureRef.Name = "" }, []string{"spec.machineTemplate.spec.infrastructureRef.name", "Required value"}},
	// distribution and the embedded spec's provider-owned fields
	{"unknown distribution", func(s *cpSpec) { s.Distribution = "rke2" }, []string{"spec.distribution", `"k0s"`, `"k3s"`}},
	{"config spec and template", func(s *cpSpec) { s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"} },
		[]string{"spec.kairosConfigSpec", "kairosConfigSpec and kairosConfigTemplate are mutually exclusive: keep one"}},
	{"embedded role worker", func(s *cpSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleWorker },
		[]string{"spec.kairosConfigSpec.role", "control-plane Machines have role control-plane: remove it"}},
	{"embedded distribution", func(s *cpSpec) { s.KairosConfigSpec.Distribution = bootstrapv1.DistributionK3s },
		[]string{"spec.kairosConfigSpec.distribution", "differs from spec.distribution k0s: remove it"}},
	{"embedded singleNode", func(s *cpSpec) { s.KairosConfigSpec.SingleNode = true },
		[]string{"spec.kairosConfigSpec.singleNode", "sets single-node mode itself when replicas is 1: remove it"}},
	{"embedded kubernetesVersion", func(s *cpSpec) { s.KairosConfigSpec.KubernetesVersion = "v1.31.2" },
		[]string{"spec.kairosConfigSpec.kubernetesVersion", "spec.version applies: remove it"}},
	// bootstrap rules, reported under spec.kairosConfigSpec
	{"embedded user name", func(s *cpSpec) { s.KairosConfigSpec.UserName = "Root User" }, []string{"spec.kairosConfigSpec.userName", "Linux user name"}},
	{"embedded password twice", func(s *cpSpec) {
		s.KairosConfigSpec.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
	},
		[]string{"spec.kairosConfigSpec.userPassword", "keep only userPasswordSecretRef"}},
	{"embedded password Secret name", func(s *cpSpec) {
		s.KairosConfigSpec.UserPassword = ""
		s.KairosConfigSpec.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "Bad_Name"}
	}, []string{"spec.kairosConfigSpec.userPasswordSecretRef.name", "name of a Secret"}},
	{"embedded github user", func(s *cpSpec) { s.KairosConfigSpec.GithubUser = "github:octocat" }, []string{"spec.kairosConfigSpec.githubUser", "without the github: prefix"}},
	{"embedded ssh key", func(s *cpSpec) { s.KairosConfigSpec.SSHPublicKey = "not-a-key" }, []string{"spec.kairosConfigSpec.sshPublicKey", "authorized_keys format"}},
	{"embedded worker token ref", func(s *cpSpec) {
		s.KairosConfigSpec.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
	},
		[]string{"spec.kairosConfigSpec.workerTokenSecretRef", "only workers use a worker token"}},
	{"embedded worker token", func(s *cpSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.KairosConfigSpec.WorkerToken = "K10abc::server:x"
	}, []string{"spec.kairosConfigSpec.workerToken", "only workers use a worker token"}},
	{"embedded k3s options on k0s", func(s *cpSpec) { s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}} },
		[]string{"spec.kairosConfigSpec.k3s", "set distribution: k3s"}},
	{"embedded k0s --single", func(s *cpSpec) { s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--single"}} },
		[]string{"spec.kairosConfigSpec.k0s.args[0]", "refuses every join"}},
	{"embedded k3s --cluster-init", func(s *cpSpec) {
		s.Distribution = bootstrapv1.DistributionK3s
		s.KairosConfigSpec.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--cluster-init"}}
	}, []string{"spec.kairosConfigSpec.k3s.args[0]", "--cluster-init is managed by kairos-capi"}},
	{"embedded k0s env name", func(s *cpSpec) {
		s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Env: map[string]string{"1BAD": "x"}}
	},
		[]string{"spec.kairosConfigSpec.k0s.env[1BAD]", "environment variable name"}},
	{"embedded k0s config not a map", func(s *cpSpec) { s.KairosConfigSpec.K0s = &bootstrapv1.DistributionOptions{Config: "- a\n- b"} },
		[]string{"spec.kairosConfigSpec.k0s.config", "not a YAML map"}},
	{"embedded relative file", func(s *cpSpec) { s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "etc/motd", Content: "hi"}} },
		[]string{"spec.kairosConfigSpec.files[0].path", "absolute, clean file path"}},
	{"embedded file permissions", func(s *cpSpec) {
		s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/motd", Permissions: "0999", Content: "hi"}}
	}, []string{"spec.kairosConfigSpec.files[0].permissions", `"0644"`}},
	{"embedded file path twice", func(s *cpSpec) {
		s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "a"}, {Path: "/etc/motd", Content: "b"}}
	}, []string{"spec.kairosConfigSpec.files[1]", "Duplicate value"}},
	{"embedded manifest name", func(s *cpSpec) { s.KairosConfigSpec.Manifests = []bootstrapv1.Manifest{{Name: "cni", Content: "a: b"}} },
		[]string{"spec.kairosConfigSpec.manifests[0].name", "ending in .yaml"}},
	{"embedded manifest not YAML", func(s *cpSpec) {
		s.KairosConfigSpec.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: [b"}}
	},
		[]string{"spec.kairosConfigSpec.manifests[0].content", "not valid YAML"}},
	{"embedded hostname and prefix", func(s *cpSpec) {
		s.KairosConfigSpec.Hostname = "node"
		s.KairosConfigSpec.HostnamePrefix = "node-"
	}, []string{"spec.kairosConfigSpec.hostnamePrefix", "use hostnamePrefix only"}},
	{"embedded virtual IP not an IP", func(s *cpSpec) { s.KairosConfigSpec.VirtualIP = &bootstrapv1.VirtualIP{Address: "api.example.com"} },
		[]string{"spec.kairosConfigSpec.virtualIP.address", "not an IP address"}},
	{"embedded virtual IP with a kube-vip image on k0s", func(s *cpSpec) {
		s.KairosConfigSpec.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10", KubeVIPImage: "example/kube-vip:v1"}
	}, []string{"spec.kairosConfigSpec.virtualIP.kubeVIPImage", "remove kubeVIPImage"}},
	{"embedded install device", func(s *cpSpec) { s.KairosConfigSpec.Install = &bootstrapv1.Install{Device: "sda"} },
		[]string{"spec.kairosConfigSpec.install.device", "/dev/sda"}},
	{"embedded fragment with p2p", func(s *cpSpec) {
		s.KairosConfigSpec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "net", Content: "p2p:\n  network_token: x"}}
	}, []string{"spec.kairosConfigSpec.cloudConfigFragments[0].content", `fragment "net": p2p: may not be set by a fragment`}},
	{"embedded fragment position", func(s *cpSpec) {
		s.KairosConfigSpec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "x", Position: "middle", Content: "a: b"}}
	}, []string{"spec.kairosConfigSpec.cloudConfigFragments[0].position", `"append"`, `"prepend"`}},
	// rollout
	{"rollout type", func(s *cpSpec) { s.Rollout.Strategy.Type = "Recreate" }, []string{"spec.rollout.strategy.type", `"RollingUpdate"`}},
	{"maxSurge 2", func(s *cpSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(2)) },
		[]string{"spec.rollout.strategy.rollingUpdate.maxSurge", "must be 0 or 1: control-plane Machines are replaced one at a time"}},
	{"maxSurge percent", func(s *cpSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromString("50%")) },
		[]string{"spec.rollout.strategy.rollingUpdate.maxSurge", "must be 0 or 1"}},
	{"maxSurge 0 with two replicas", func(s *cpSpec) {
		s.Replicas = ptr.To[int32](2)
		s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(0))
	}, []string{"spec.rollout.strategy.rollingUpdate.maxSurge", "with 2 replicas", "at least 3 replicas"}},
	// Machine naming, metadata, kubeconfig
	{"naming without random", func(s *cpSpec) { s.MachineNaming.Template = "{{ .kairosControlPlane.name }}" },
		[]string{"spec.machineNaming.template", "must contain {{ .random }} so that Machine names are unique"}},
	{"naming not a template", func(s *cpSpec) { s.MachineNaming.Template = "{{ .random }}-{{ .cluster.name" },
		[]string{"spec.machineNaming.template", "is not a valid Go template"}},
	{"machine label", func(s *cpSpec) { s.MachineTemplate.ObjectMeta.Labels = map[string]string{"bad key!": "x"} },
		[]string{"spec.machineTemplate.metadata.labels", "bad key!"}},
	{"machine annotation", func(s *cpSpec) { s.MachineTemplate.ObjectMeta.Annotations = map[string]string{"a/b/c": "x"} },
		[]string{"spec.machineTemplate.metadata.annotations", "a/b/c"}},
	{"kubeconfig label", func(s *cpSpec) { s.Kubeconfig.ObjectMeta.Labels = map[string]string{"team": "a b"} },
		[]string{"spec.kubeconfig.metadata.labels", "a b"}},
	{"kubeconfig certificate lifetime", func(s *cpSpec) { s.Kubeconfig.ClientCertificateValiditySeconds = ptr.To[int32](60) },
		[]string{"spec.kubeconfig.clientCertificateValiditySeconds", "greater than or equal to 3600"}},
	// naming templates are rendered, not only parsed
	{"naming renders an invalid name", func(s *cpSpec) { s.MachineNaming.Template = "{{ .random }}_X" },
		[]string{"spec.machineNaming.template", "not a valid Machine name"}},
	{"naming uses an unknown key", func(s *cpSpec) { s.MachineNaming.Template = "{{ .random }}-{{ .cluster.nam }}" },
		[]string{"spec.machineNaming.template", "use .cluster.name, .kairosControlPlane.name and .random"}},
	// the embedded KairosConfig spec must render, as the bootstrap provider would
	{"embedded spec conflicts with a fragment", func(s *cpSpec) {
		s.KairosConfigSpec.HostnamePrefix = "node-"
		s.KairosConfigSpec.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
		s.KairosConfigSpec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "host", Content: `hostname: "cp-{{ trunc 4 .MachineID }}"`}}
	}, []string{"spec.kairosConfigSpec.cloudConfigFragments[0].content", `key "hostname" is set by both "generated" and fragment "host"`}},
	// every control-plane Machine gets the embedded spec: no literal hostname
	{"embedded literal hostname", func(s *cpSpec) { s.KairosConfigSpec.Hostname = "cp" },
		[]string{"spec.kairosConfigSpec.hostname", `would be named "cp"`, "use hostnamePrefix"}},
	{"embedded fragment with a literal hostname", func(s *cpSpec) {
		s.KairosConfigSpec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "host", Content: "hostname: cp"}}
	}, []string{"spec.kairosConfigSpec.cloudConfigFragments[0].content", `sets the literal hostname "cp"`}},
	// etcd snapshots: what CEL cannot check, the webhook does (the cron grammar) or the dry
	// render does (host[:port], the certificates), reported at spec.etcd.snapshots.
	{"snapshot schedule cron and systemd read differently", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.Schedule = "0 0 1 * 1"
	}, []string{"spec.etcd.snapshots.schedule", "restricts both day of month and day of week", "set one of them to *"}},
	{"snapshot endpoint port", func(s *cpSpec) { s.Etcd.Snapshots = snapshots(); s.Etcd.Snapshots.S3.Endpoint = "s3.example.com:99999" },
		[]string{"spec.etcd.snapshots.s3.endpoint", "is not host[:port]"}},
	{"snapshot CA bundle that does not parse", func(s *cpSpec) {
		s.Etcd.Snapshots = snapshots()
		s.Etcd.Snapshots.S3.CABundle = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
	}, []string{"spec.etcd.snapshots.s3.caBundle", "is not a list of PEM certificates"}},
}

func assertRejected(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("rejection does not contain %q:\n%v", w, err)
		}
	}
}

func TestInvalidKairosControlPlanes(t *testing.T) {
	if len(invalidControlPlanes) < 30 {
		t.Fatalf("the table must hold at least 30 cases, has %d", len(invalidControlPlanes))
	}
	ns := newNamespace(t)
	ctx := framework.Context(t)

	// The base of every case is accepted.
	if err := mgmt.Client.Create(ctx, kcp(ns, "valid", validSpec())); err != nil {
		t.Fatalf("the valid base spec is refused: %v", err)
	}

	for i, tc := range invalidControlPlanes {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(&spec)
			err := mgmt.Client.Create(ctx, kcp(ns, fmt.Sprintf("invalid-%02d", i), spec))
			assertRejected(t, err, tc.want)
		})
	}
}

// invalidTemplates are KairosControlPlaneTemplates with one mistake each.
var invalidTemplates = []struct {
	name   string
	mutate func(*controlplanev1.KairosControlPlaneTemplateResource)
	want   []string
}{
	{"unknown distribution", func(r *controlplanev1.KairosControlPlaneTemplateResource) { r.Spec.Distribution = "rke2" },
		[]string{"spec.template.spec.distribution", `"k0s"`}},
	{"config spec and template", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
	}, []string{"spec.template.spec.kairosConfigSpec", "keep one"}},
	{"embedded role", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.KairosConfigSpec.Role = bootstrapv1.RoleWorker
	},
		[]string{"spec.template.spec.kairosConfigSpec.role", "remove it"}},
	{"embedded bootstrap rule", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/motd", Owner: "root", Content: "hi"}}
	}, []string{"spec.template.spec.kairosConfigSpec.files[0].owner", `"user:group"`}},
	{"maxSurge 2", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(2))
	}, []string{"spec.template.spec.rollout.strategy.rollingUpdate.maxSurge", "must be 0 or 1"}},
	{"naming without random", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.MachineNaming.Template = "cp-{{ .cluster.name }}"
	},
		[]string{"spec.template.spec.machineNaming.template", "{{ .random }}"}},
	{"template metadata", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.ObjectMeta.Labels = map[string]string{"bad key!": "x"}
	},
		[]string{"spec.template.metadata.labels", "bad key!"}},
	{"machine metadata", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.MachineTemplate.ObjectMeta.Annotations = map[string]string{"a/b/c": "x"}
	}, []string{"spec.template.spec.machineTemplate.metadata.annotations", "a/b/c"}},
	{"embedded literal hostname", func(r *controlplanev1.KairosControlPlaneTemplateResource) {
		r.Spec.KairosConfigSpec.Hostname = "cp"
	}, []string{"spec.template.spec.kairosConfigSpec.hostname", "use hostnamePrefix"}},
}

func validTemplate(ns, name string) *controlplanev1.KairosControlPlaneTemplate {
	return &controlplanev1.KairosControlPlaneTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: controlplanev1.KairosControlPlaneTemplateSpec{Template: controlplanev1.KairosControlPlaneTemplateResource{
			Spec: controlplanev1.KairosControlPlaneTemplateResourceSpec{KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"}},
		}},
	}
}

func TestInvalidKairosControlPlaneTemplates(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	if err := mgmt.Client.Create(ctx, validTemplate(ns, "valid")); err != nil {
		t.Fatalf("the valid base template is refused: %v", err)
	}
	for i, tc := range invalidTemplates {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := validTemplate(ns, fmt.Sprintf("invalid-%02d", i))
			tc.mutate(&tmpl.Spec.Template)
			assertRejected(t, mgmt.Client.Create(ctx, tmpl), tc.want)
		})
	}
}

// TestInvalidUpdates creates a valid KairosControlPlane and then changes it.
func TestInvalidUpdates(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	tests := []struct {
		name   string
		create func(*cpSpec)
		update func(*cpSpec)
		want   []string // nil: the update is accepted
	}{
		{name: "patch downgrade", update: func(s *cpSpec) { s.Version = "v1.31.1" },
			want: []string{"spec.version", "cannot go down from v1.31.2 to v1.31.1", "keep v1.31.2 or move forward"}},
		{name: "minor downgrade", update: func(s *cpSpec) { s.Version = "v1.30.9" },
			want: []string{"spec.version", "Kubernetes does not support downgrades"}},
		{name: "minor skip", update: func(s *cpSpec) { s.Version = "v1.33.0" },
			want: []string{"spec.version", "cannot skip a minor version (v1.31.2 to v1.33.0)", "upgrade to v1.32.x first"}},
		{name: "major jump", update: func(s *cpSpec) { s.Version = "v2.0.0" }, want: []string{"spec.version", "cannot skip a minor version"}},
		{name: "distribution change", update: func(s *cpSpec) { s.Distribution = bootstrapv1.DistributionK3s },
			want: []string{"spec.distribution", "cannot change from k0s to k3s", "create a new cluster and move the workloads"}},
		{name: "distribution set after defaulting", create: func(s *cpSpec) { s.Distribution = "" },
			update: func(s *cpSpec) { s.Distribution = bootstrapv1.DistributionK3s }, want: []string{"spec.distribution", "cannot change from k0s to k3s"}},
		{name: "k3s to k0s", create: func(s *cpSpec) { s.Distribution = bootstrapv1.DistributionK3s },
			update: func(s *cpSpec) { s.Distribution = bootstrapv1.DistributionK0s }, want: []string{"spec.distribution", "cannot change from k3s to k0s"}},
		{name: "invalid change", update: func(s *cpSpec) { s.KairosConfigSpec.Role = bootstrapv1.RoleWorker },
			want: []string{"spec.kairosConfigSpec.role", "remove it"}},
		{name: "scale to an even number", update: func(s *cpSpec) { s.Replicas = ptr.To[int32](4) }, want: []string{"spec.replicas", "must be odd"}},
		{name: "literal hostname", update: func(s *cpSpec) { s.KairosConfigSpec.Hostname = "cp" }, want: []string{"spec.kairosConfigSpec.hostname", "use hostnamePrefix"}},
		// Accepted changes.
		{name: "patch upgrade", update: func(s *cpSpec) { s.Version = "v1.31.9" }},
		{name: "minor upgrade", update: func(s *cpSpec) { s.Version = "v1.32.0" }},
		{name: "minor upgrade with build", update: func(s *cpSpec) { s.Version = "v1.32.3+k0s.0" }},
		{name: "scale up", update: func(s *cpSpec) { s.Replicas = ptr.To[int32](5) }},
		// One replica without surge can only change in place (a warning says so: TestDefaultsAndWarnings).
		{name: "scale to one with maxSurge 0", create: func(s *cpSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(0)) },
			update: func(s *cpSpec) { s.Replicas = ptr.To[int32](1) }},
		{name: "explicit default distribution", create: func(s *cpSpec) { s.Distribution = "" },
			update: func(s *cpSpec) { s.Distribution = bootstrapv1.DistributionK0s }},
		{name: "bootstrap spec change", update: func(s *cpSpec) { s.KairosConfigSpec.PreCommands = []string{"echo hi"} }},
		{name: "switch to a config template", update: func(s *cpSpec) {
			s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			if tc.create != nil {
				tc.create(&spec)
			}
			obj := kcp(ns, fmt.Sprintf("update-%02d", i), spec)
			if err := mgmt.Client.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.update(&obj.Spec)
			err := mgmt.Client.Update(ctx, obj)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("update refused: %v", err)
				}
				return
			}
			assertRejected(t, err, tc.want)
		})
	}
}

// TestDefaultsAndWarnings: what the API server returns after admission, and stores, is the spec
// sent with controlplanev1.KairosControlPlaneSpec.Default applied (for templates,
// KairosControlPlaneTemplateResourceSpec.Default); the development password draws a warning,
// on create and on update.
func TestDefaultsAndWarnings(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	c, collector := mgmt.WarningClient(t)

	// Only what the API requires: everything else is defaulted.
	minimal := validSpec()
	minimal.Replicas = nil
	minimal.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
	obj := kcp(ns, "defaults", minimal)
	sent := *obj.Spec.DeepCopy()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The embedded kairosConfigSpec is stored as written (Default leaves it): the controller
	// defaults each Machine's copy.
	framework.ExpectDefaulted(t, "minimal KairosControlPlane spec", sent, obj.Spec)
	// The stored object (not only the create response) carries the defaults.
	stored := &controlplanev1.KairosControlPlane{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "stored KairosControlPlane spec", sent, stored.Spec)
	if !collector.Contain("spec.kairosConfigSpec.userPassword: the login user \"kairos\" has the well-known development password") {
		t.Errorf("no warning for the default password of the embedded spec: %q", collector.List())
	}
	if collector.Contain("etcd members") {
		t.Errorf("replica warning for one replica: %q", collector.List())
	}

	// Warnings on update, too.
	collector.Reset()
	odd := kcp(ns, "odd", validSpec())
	if err := c.Create(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if len(collector.List()) != 0 {
		t.Errorf("unexpected warnings: %q", collector.List())
	}
	odd.Spec.KairosConfigSpec.UserPassword = "kairos"
	if err := c.Update(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if !collector.Contain("well-known development password") {
		t.Errorf("no warning when setting the development password: %q", collector.List())
	}

	// One replica without surge (the single-node edge cluster) is accepted, with the warning that
	// only in-place changes can proceed; replicas defaulted to 1 count too.
	collector.Reset()
	single := validSpec()
	single.Replicas = nil
	single.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(0))
	if err := c.Create(ctx, kcp(ns, "single-no-surge", single)); err != nil {
		t.Fatal(err)
	}
	if !collector.Contain("spec.rollout.strategy.rollingUpdate.maxSurge: 0 with 1 replica: only changes that can be made in place proceed") {
		t.Errorf("no in-place warning for one replica without surge: %q", collector.List())
	}

	// No password warning when the bootstrap spec comes from a KairosConfigTemplate (which
	// warns about itself when created).
	collector.Reset()
	ref := validSpec()
	ref.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
	ref.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp"}
	if err := c.Create(ctx, kcp(ns, "with-template", ref)); err != nil {
		t.Fatal(err)
	}
	if len(collector.List()) != 0 {
		t.Errorf("unexpected warnings: %q", collector.List())
	}

	// Templates get their defaults too.
	tmpl := validTemplate(ns, "template-defaults")
	tmpl.Spec.Template.Spec = controlplanev1.KairosControlPlaneTemplateResourceSpec{}
	sentTemplate := *tmpl.Spec.Template.Spec.DeepCopy()
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "empty KairosControlPlaneTemplate spec.template.spec", sentTemplate, tmpl.Spec.Template.Spec)
}

// TestTemplateImmutableExceptTopologyDryRun: templates are immutable, but the topology
// controller's server-side-apply dry runs pass.
func TestTemplateImmutableExceptTopologyDryRun(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	tmpl := validTemplate(ns, "cp")
	tmpl.Spec.Template.Spec.Distribution = bootstrapv1.DistributionK3s
	if err := mgmt.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	const immutable = "KairosControlPlaneTemplate spec is immutable: create a new template and point the ClusterClass at it"

	changed := tmpl.DeepCopy()
	changed.Spec.Template.Spec.KairosConfigSpec.PreCommands = []string{"echo hi"}
	err := mgmt.Client.Update(ctx, changed)
	assertRejected(t, err, []string{"spec.template.spec", immutable})

	changed = tmpl.DeepCopy()
	changed.Spec.Template.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = surge(intstr.FromInt32(0))
	assertRejected(t, mgmt.Client.Update(ctx, changed), []string{"spec.template.spec", immutable})

	dry := tmpl.DeepCopy()
	dry.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	dry.Spec.Template.Spec.KairosConfigSpec.PreCommands = []string{"echo hi"}
	if err := mgmt.Client.Update(ctx, dry, client.DryRunAll); err != nil {
		t.Fatalf("topology dry run refused: %v", err)
	}
	// The annotation alone, without a dry run, changes nothing.
	dry = tmpl.DeepCopy()
	dry.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	dry.Spec.Template.Spec.KairosConfigSpec.PreCommands = []string{"echo hi"}
	assertRejected(t, mgmt.Client.Update(ctx, dry), []string{immutable})
	// Nor does a dry run without the annotation.
	dry = tmpl.DeepCopy()
	dry.Spec.Template.Spec.KairosConfigSpec.PreCommands = []string{"echo hi"}
	assertRejected(t, mgmt.Client.Update(ctx, dry, client.DryRunAll), []string{immutable})
	// A dry run still validates.
	dry = tmpl.DeepCopy()
	dry.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	dry.Spec.Template.Spec.KairosConfigSpec.Role = bootstrapv1.RoleWorker
	assertRejected(t, mgmt.Client.Update(ctx, dry, client.DryRunAll), []string{"spec.template.spec.kairosConfigSpec.role"})

	// The object's own metadata may change (spec.template.metadata is part of the spec).
	meta := tmpl.DeepCopy()
	meta.Labels = map[string]string{"team": "a"}
	if err := mgmt.Client.Update(ctx, meta); err != nil {
		t.Fatalf("label change refused: %v", err)
	}

	// Nothing changed on the server.
	stored := &controlplanev1.KairosControlPlaneTemplate{}
	if err := mgmt.Client.Get(ctx, client.ObjectKeyFromObject(tmpl), stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Spec.Template.Spec.KairosConfigSpec.PreCommands) != 0 || *stored.Spec.Template.Spec.Rollout.Strategy.RollingUpdate.MaxSurge != intstr.FromInt32(1) {
		t.Errorf("template changed: %+v", stored.Spec.Template.Spec)
	}
}

// TestBothProvidersServed: the bootstrap provider's webhooks are served next to the control
// plane's from one manager (their configurations do not replace each other).
func TestBothProvidersServed(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)

	kc := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns}, Spec: bootstrapv1.KairosConfigSpec{UserPassword: "x"}}
	sentConfig := *kc.Spec.DeepCopy()
	if err := mgmt.Client.Create(ctx, kc); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "KairosConfig spec (through the bootstrap provider's webhooks)", sentConfig, kc.Spec)
	bad := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}, Spec: bootstrapv1.KairosConfigSpec{UserName: "Root User"}}
	assertRejected(t, mgmt.Client.Create(ctx, bad), []string{"spec.userName", "Linux user name"})

	cp := kcp(ns, "cp", validSpec())
	cp.Spec.Distribution = ""
	sentCP := *cp.Spec.DeepCopy()
	if err := mgmt.Client.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	framework.ExpectDefaulted(t, "KairosControlPlane spec (through the control-plane provider's webhooks)", sentCP, cp.Spec)
}
