package userdata_test

import (
	"bytes"
	"encoding/base64"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// fixture is the fixed cluster material every render of this package uses.
type fixture struct {
	pki            *render.PKI
	k3sToken       string // the cluster's server token
	k3sAgentToken  string // the cluster's agent token
	k3sOverride    string // a second, distinct agent token (user override)
	k3sFromSecret  string // a third, read from a Secret
	k0sWorkerToken string
}

var fixtureOnce = sync.OnceValues(func() (*fixture, error) {
	var p render.PKI
	for _, kp := range []*pki.KeyPair{&p.ClusterCA, &p.EtcdCA, &p.FrontProxyCA} {
		ca, err := pki.NewCA("userdata-test", time.Hour)
		if err != nil {
			return nil, err
		}
		*kp = *ca
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		return nil, err
	}
	p.ServiceAccount = *sa
	f := &fixture{pki: &p}
	hash, err := token.K3sCAHash(p.ClusterCA.Cert)
	if err != nil {
		return nil, err
	}
	if f.k3sToken, err = token.FormatK3sToken(hash, "server", "clustertokenpassword"); err != nil {
		return nil, err
	}
	if f.k3sAgentToken, err = token.FormatK3sToken(hash, token.K3sAgentUser, "agenttokenpassword"); err != nil {
		return nil, err
	}
	if f.k3sOverride, err = token.FormatK3sToken(hash, token.K3sAgentUser, "overridepassword"); err != nil {
		return nil, err
	}
	if f.k3sFromSecret, err = token.FormatK3sToken(hash, token.K3sAgentUser, "secretpassword"); err != nil {
		return nil, err
	}
	f.k0sWorkerToken, err = token.NewK0sJoinToken(token.K0sWorkerToken, "https://192.0.2.10:6443", p.ClusterCA.Cert,
		token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"})
	return f, err
})

func testFixture(t *testing.T) *fixture {
	t.Helper()
	f, err := fixtureOnce()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var sshKey = "ssh-ed25519 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 51)) + " tester@host"

// secretsFor holds the content of every Secret key the table below references.
func secretsFor(f *fixture) map[userdata.Ref]string {
	return map[userdata.Ref]string{
		{Name: "pw", Key: "value"}:         "password-from-secret",
		{Name: "tok", Key: "value"}:        f.k3sFromSecret,
		{Name: "files", Key: "motd"}:       "motd-from-secret",
		{Name: "manifests", Key: "cni"}:    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: manifest-from-secret\n",
		{Name: "fragments", Key: "extra"}:  "#cloud-config\nstages:\n  boot:\n    - name: fragment-from-secret\n      commands: [\"true\"]\n",
		{Name: "fragments", Key: "value"}:  "#cloud-config\nstages:\n  boot:\n    - name: fragment-default-key\n      commands: [\"true\"]\n",
		{Name: "other-pw", Key: "custom"}:  "other-password",
		{Name: "files", Key: "value"}:      "file-default-key",
		{Name: "manifests", Key: "value"}:  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: manifest-default-key\n",
		{Name: "tok", Key: "other-token"}:  f.k3sOverride,
		{Name: "unused", Key: "value"}:     "unused",
		{Name: "fragments", Key: "prefix"}: "#cloud-config\n",
		// kubectl create secret --from-file keeps the file's newline: it is not part of the key.
		{Name: "s3", Key: bootstrapv1.EtcdSnapshotAccessKeyIDKey}:     "AKIAFROMSECRET\n",
		{Name: "s3", Key: bootstrapv1.EtcdSnapshotSecretAccessKeyKey}: "secret-from-secret",
	}
}

// The fixture Cluster's name and namespace.
const fixtureCluster, fixtureNamespace = "demo", "sites-eu"

func ptrTo[T any](v T) *T { return &v }

// inputsFor derives the render inputs from a spec the way the reconciler does: the spec's
// kubernetesVersion wins over the Machine's (v1.31.2 here), control-plane nodes get the PKI
// and initialize the cluster, workers get the user's token override or the cluster's token.
func inputsFor(f *fixture, spec *bootstrapv1.KairosConfigSpec) userdata.Inputs {
	in := userdata.Inputs{
		ClusterName:       fixtureCluster,
		Namespace:         fixtureNamespace,
		Endpoint:          render.Endpoint{Host: "192.0.2.10", Port: 6443},
		KubernetesVersion: "v1.31.2",
		Secrets:           secretsFor(f),
		MachineName:       testMachineName,
	}
	if spec.KubernetesVersion != "" {
		in.KubernetesVersion = spec.KubernetesVersion
	}
	if spec.Role == bootstrapv1.RoleControlPlane {
		in.PKI, in.Init = f.pki, true
		if spec.Distribution == bootstrapv1.DistributionK3s {
			in.JoinToken, in.AgentToken = f.k3sToken, f.k3sAgentToken
		}
		return in
	}
	if t, ok := userdata.WorkerTokenOverride(spec, in.Secrets); ok {
		in.JoinToken = t
		return in
	}
	if spec.Distribution == bootstrapv1.DistributionK3s {
		in.JoinToken = f.k3sAgentToken
	} else {
		in.JoinToken = f.k0sWorkerToken
	}
	return in
}

// testMachineName is the Machine the test data is rendered for.
const testMachineName = "md-0-7d9f8-x2k4q"

func baseSpec(kind string) bootstrapv1.KairosConfigSpec {
	s := bootstrapv1.KairosConfigSpec{UserPassword: "base-password"}
	switch kind {
	case "cp-k0s":
		s.Role, s.Distribution = bootstrapv1.RoleControlPlane, bootstrapv1.DistributionK0s
	case "cp-k3s":
		s.Role, s.Distribution = bootstrapv1.RoleControlPlane, bootstrapv1.DistributionK3s
	case "wk-k0s":
		s.Role, s.Distribution = bootstrapv1.RoleWorker, bootstrapv1.DistributionK0s
	case "wk-k3s":
		s.Role, s.Distribution = bootstrapv1.RoleWorker, bootstrapv1.DistributionK3s
	default:
		panic("unknown base " + kind)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func renderSpec(t *testing.T, s bootstrapv1.KairosConfigSpec) ([]byte, error) {
	t.Helper()
	f := testFixture(t)
	s.Default()
	return userdata.Render(&s, inputsFor(f, &s))
}

type specField = func(*bootstrapv1.KairosConfigSpec)

// fieldCase exercises one spec field: setup is applied to both the base and the variant,
// mutate only to the variant. The variant must render differently from the base and contain
// every want string; check, when set, replaces that comparison.
type fieldCase struct {
	base   string
	setup  specField
	mutate specField
	want   []string
	check  func(t *testing.T, base, variant []byte, baseErr, variantErr error)
}

func fieldCases(f *fixture) map[string]fieldCase {
	fragment := func(name, content string) bootstrapv1.CloudConfigFragment {
		return bootstrapv1.CloudConfigFragment{Name: name, Content: content}
	}
	fragStep := "#cloud-config\nstages:\n  boot:\n    - name: fragment-step\n      commands: [\"true\"]\n"
	withInstall := func(s *bootstrapv1.KairosConfigSpec) { s.Install = &bootstrapv1.Install{} }
	withFile := func(s *bootstrapv1.KairosConfigSpec) {
		s.Files = []bootstrapv1.File{{Path: "/etc/base.conf", Content: "base-content"}}
	}
	withManifest := func(s *bootstrapv1.KairosConfigSpec) {
		s.Manifests = []bootstrapv1.Manifest{{Name: "base.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: base\n"}}
	}
	withK0s := func(s *bootstrapv1.KairosConfigSpec) { s.K0s = &bootstrapv1.DistributionOptions{} }
	// The fixture's endpoint host is 192.0.2.10.
	withVIP := func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10"} }
	withK3s := func(s *bootstrapv1.KairosConfigSpec) { s.K3s = &bootstrapv1.DistributionOptions{} }
	withFragment := func(s *bootstrapv1.KairosConfigSpec) {
		s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{fragment("base", fragStep)}
	}
	withSnapshots := func(s *bootstrapv1.KairosConfigSpec) {
		s.EtcdSnapshots = &bootstrapv1.EtcdSnapshots{S3: bootstrapv1.EtcdSnapshotS3{
			Endpoint: "s3.example.com", Bucket: "backups", Prefix: "sites",
			CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
		}}
		s.EtcdSnapshots.Default()
	}
	return map[string]fieldCase{
		"EtcdSnapshots": {base: "cp-k3s", mutate: withSnapshots,
			// The folder is <prefix>/<namespace>/<cluster>; the credentials come from the Secret,
			// without the newline kubectl keeps.
			want: []string{"etcd-s3-folder: sites/" + fixtureNamespace + "/" + fixtureCluster + "\n", "etcd-s3-access-key: AKIAFROMSECRET\n", "etcd-s3-secret-key: secret-from-secret", "etcd-s3-endpoint: s3.example.com"}},
		"EtcdSnapshots.Schedule": {base: "cp-k0s", setup: withSnapshots, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.EtcdSnapshots.Schedule = "30 1 * * 1-5" },
			want: []string{"OnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 01:30:00"}},
		"EtcdSnapshots.Retention": {base: "cp-k0s", setup: withSnapshots, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.EtcdSnapshots.Retention = ptrTo[int32](12) },
			want: []string{"retention=12"}},
		"EtcdSnapshots.S3": {base: "cp-k0s", setup: withSnapshots, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.EtcdSnapshots.S3.Bucket = "other-bucket" },
			want: []string{"url='https://s3.example.com/other-bucket'"}},
		"EtcdSnapshots.Restore": {base: "cp-k0s", setup: withSnapshots, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.EtcdSnapshots.Restore = bootstrapv1.EtcdSnapshotRestoreNewest
		}, want: []string{"ExecStartPre=/bin/sh " + render.EtcdRestoreScript}},
		"Role": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Role = bootstrapv1.RoleControlPlane },
			want: []string{"k0s:", "--enable-worker", render.K0sPKIDir + "/ca.key"}},
		"Distribution": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Distribution = bootstrapv1.DistributionK3s },
			want: []string{"k3s-agent:", "--server=https://192.0.2.10:6443"}},
		"KubernetesVersion": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.32.1" },
			want: []string{"want=v1.32.1"}},
		"SingleNode": {base: "cp-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.SingleNode = true },
			want: []string{"--no-taints"}},
		"UserName": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "alice" },
			want: []string{"name: alice"}},
		"UserPassword": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.UserPassword = "distinct-password" },
			want: []string{"distinct-password"}},
		"UserPasswordSecretRef": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = ""
			s.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
		}, want: []string{"password-from-secret"}},
		"UserGroups": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.UserGroups = []string{"wheel", "docker"} },
			want: []string{"docker"}},
		"GithubUser": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "octocat" },
			want: []string{"github:octocat"}},
		"SSHPublicKey": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = sshKey },
			want: []string{sshKey}},
		"WorkerToken": {base: "wk-k3s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = f.k3sOverride },
			want: []string{f.k3sOverride}},
		"WorkerTokenSecretRef": {base: "wk-k3s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok"}
		}, want: []string{f.k3sFromSecret}},
		"Manifests": {base: "cp-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "cni.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: distinct-cm\n"}}
		}, want: []string{"distinct-cm", render.K0sManifestDir + "/cni"}},
		"Files": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/distinct.conf", Content: "distinct-content"}}
		}, want: []string{"/etc/distinct.conf", "distinct-content"}},
		"PreCommands": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.PreCommands = []string{"echo distinct-pre"} },
			want: []string{"echo distinct-pre", render.PreCommandsScript}},
		"PostCommands": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.PostCommands = []string{"echo distinct-post"} },
			want: []string{"echo distinct-post", render.PostCommandsScript}},
		"Image": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Image = "registry.local/edge/kairos-distinct:custom" },
			want: []string{"image=registry.local/edge/kairos-distinct:custom", render.ImageScript + " upgrade"}},
		"Hostname": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "node-distinct" },
			want: []string{"hostname: node-distinct"}},
		"HostnamePrefix": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.HostnamePrefix = "pool-x-" },
			want: []string{"pool-x-" + render.HostnameSuffixTemplate}},
		// The Node gets its Machine's provider ID from the controller: the node is named after
		// the Machine and k3s servers run without the embedded cloud controller.
		"ProviderID": {base: "cp-k3s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
		}, check: func(t *testing.T, base, variant []byte, baseErr, variantErr error) {
			noErrors(t, baseErr, variantErr)
			for _, w := range []string{"--disable-cloud-controller", "hostname: " + testMachineName} {
				if !bytes.Contains(base, []byte(w)) || bytes.Contains(variant, []byte(w)) {
					t.Errorf("%q: in the Machine source's data %v, in the Distribution source's %v", w, bytes.Contains(base, []byte(w)), bytes.Contains(variant, []byte(w)))
				}
			}
		}},
		"ProviderID.Source": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
		}, check: func(t *testing.T, base, variant []byte, baseErr, variantErr error) {
			noErrors(t, baseErr, variantErr)
			if !bytes.Contains(base, []byte("hostname: "+testMachineName)) || bytes.Contains(variant, []byte("hostname:")) {
				t.Errorf("a k0s worker is named after its Machine only with source Machine:\n%s\n---\n%s", base, variant)
			}
		}},
		"VirtualIP": {base: "cp-k0s", mutate: withVIP,
			want: []string{"controlPlaneLoadBalancing:", "192.0.2.10/32", "--disable-components=endpoint-reconciler"}},
		"VirtualIP.Address": {base: "cp-k0s", setup: withVIP, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP.Address = "192.0.2.99" },
			check: func(t *testing.T, base, variant []byte, baseErr, variantErr error) {
				noErrors(t, baseErr)
				if variantErr == nil || !strings.Contains(variantErr.Error(), "virtualIP.address") || !strings.Contains(variantErr.Error(), "set the endpoint host") {
					t.Errorf("a virtual IP that is not the endpoint: %v", variantErr)
				}
			}},
		"VirtualIP.PrefixLength": {base: "cp-k0s", setup: withVIP, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP.PrefixLength = 24 },
			want: []string{"192.0.2.10/24"}},
		"VirtualIP.Interface": {base: "cp-k3s", setup: withVIP, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP.Interface = "ens192" },
			want: []string{"value: ens192"}},
		"VirtualIP.VirtualRouterID": {base: "cp-k0s", setup: withVIP, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP.VirtualRouterID = 9 },
			want: []string{"virtualRouterID: 9"}},
		"VirtualIP.KubeVIPImage": {base: "cp-k3s", setup: withVIP, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.VirtualIP.KubeVIPImage = "registry.example.com/kube-vip:v9" },
			want: []string{"image: registry.example.com/kube-vip:v9"}},
		"Install": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Install = &bootstrapv1.Install{Device: "/dev/vda"} },
			want: []string{"install:", "device: /dev/vda", "auto: true"}},
		"Install.Auto": {base: "wk-k0s", setup: withInstall, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Install.Auto = new(bool) },
			want: []string{"auto: false"}},
		"Install.Device": {base: "wk-k0s", setup: withInstall, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Install.Device = "/dev/disk/by-id/distinct" },
			want: []string{"device: /dev/disk/by-id/distinct"}},
		"Install.Reboot": {base: "wk-k0s", setup: func(s *bootstrapv1.KairosConfigSpec) { s.Install = &bootstrapv1.Install{Poweroff: true} },
			mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Install.Poweroff, s.Install.Reboot = false, ptr(true) },
			want:   []string{"reboot: true"}},
		"Install.Poweroff": {base: "wk-k0s", setup: withInstall, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Install.Poweroff, s.Install.Reboot = true, ptr(false) },
			want: []string{"poweroff: true"}},
		"K0s": {base: "cp-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		}, want: []string{"--debug"}},
		"K0s.Args": {base: "wk-k0s", setup: withK0s, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.K0s.Args = []string{"--labels=distinct=1"} },
			want: []string{"--labels=distinct=1"}},
		"K0s.Env": {base: "wk-k0s", setup: withK0s, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.K0s.Env = map[string]string{"DISTINCT_ENV": "on"} },
			want: []string{"DISTINCT_ENV: \"on\""}},
		"K0s.Config": {base: "cp-k0s", setup: withK0s, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s.Config = "spec:\n  network:\n    kuberouter:\n      peerRouterASNs: distinct-asn\n"
		}, want: []string{"distinct-asn"}},
		"K3s": {base: "wk-k3s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		}, want: []string{"--debug"}},
		"K3s.Args": {base: "cp-k3s", setup: withK3s, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.K3s.Args = []string{"--node-label=distinct=1"} },
			want: []string{"--node-label=distinct=1"}},
		"K3s.Env": {base: "wk-k3s", setup: withK3s, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.K3s.Env = map[string]string{"DISTINCT_ENV": "on"} },
			want: []string{"DISTINCT_ENV"}},
		"K3s.Config": {base: "wk-k3s", setup: withK3s, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.K3s.Config = "node-label:\n  - distinct=1\n" },
			want: []string{render.K3sUserConfigPath, "distinct=1"}},
		"Files.Path": {base: "wk-k0s", setup: withFile, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Files[0].Path = "/etc/distinct-path.conf" },
			want: []string{"/etc/distinct-path.conf"}},
		"Files.Owner": {base: "wk-k0s", setup: withFile, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Files[0].Owner = "kairos:admin" },
			want: []string{"ownerstring: kairos:admin"}},
		"Files.Permissions": {base: "wk-k0s", setup: withFile, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Files[0].Permissions = "0640" },
			check: func(t *testing.T, base, variant []byte, baseErr, variantErr error) {
				noErrors(t, baseErr, variantErr)
				if got := fileMode(t, base, "/etc/base.conf"); got != 0o600 {
					t.Errorf("default permissions = %#o, want 0600", got)
				}
				if got := fileMode(t, variant, "/etc/base.conf"); got != 0o640 {
					t.Errorf("permissions = %#o, want 0640", got)
				}
			}},
		"Files.Content": {base: "wk-k0s", setup: withFile, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Files[0].Content = "distinct-file-content" },
			want: []string{"distinct-file-content"}},
		"Files.ContentFrom": {base: "wk-k0s", setup: withFile, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.Files[0].Content = ""
			s.Files[0].ContentFrom = &bootstrapv1.SecretKeyReference{Name: "files", Key: "motd"}
		}, want: []string{"motd-from-secret"}},
		"Manifests.Name": {base: "cp-k0s", setup: withManifest, mutate: func(s *bootstrapv1.KairosConfigSpec) { s.Manifests[0].Name = "distinct.yaml" },
			want: []string{render.K0sManifestDir + "/distinct"}},
		"Manifests.Content": {base: "cp-k3s", setup: withManifest, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests[0].Content = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: distinct-manifest\n"
		}, want: []string{"distinct-manifest"}},
		"Manifests.ContentFrom": {base: "cp-k0s", setup: withManifest, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests[0].Content = ""
			s.Manifests[0].ContentFrom = &bootstrapv1.SecretKeyReference{Name: "manifests", Key: "cni"}
		}, want: []string{"manifest-from-secret"}},
		"CloudConfigFragments": {base: "wk-k0s", mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{fragment("extra", strings.ReplaceAll(fragStep, "fragment-step", "distinct-step"))}
		}, want: []string{"distinct-step"}},
		"CloudConfigFragments.Name": {base: "wk-k0s",
			// The name only appears in merge errors: a fragment conflicting with the generated
			// hostname must be named in the error.
			setup: func(s *bootstrapv1.KairosConfigSpec) {
				s.Hostname = "node-1"
				s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{fragment("base", "hostname: other\n")}
			},
			mutate: func(s *bootstrapv1.KairosConfigSpec) { s.CloudConfigFragments[0].Name = "distinct-name" },
			check: func(t *testing.T, _, _ []byte, baseErr, variantErr error) {
				if baseErr == nil || variantErr == nil {
					t.Fatalf("a fragment setting the generated hostname must fail: %v, %v", baseErr, variantErr)
				}
				if !strings.Contains(baseErr.Error(), `fragment "base"`) || !strings.Contains(variantErr.Error(), `fragment "distinct-name"`) {
					t.Errorf("merge errors do not name the fragment: %v / %v", baseErr, variantErr)
				}
			}},
		"CloudConfigFragments.Position": {base: "wk-k0s", setup: withFragment,
			mutate: func(s *bootstrapv1.KairosConfigSpec) {
				s.CloudConfigFragments[0].Position = bootstrapv1.FragmentPrepend
			},
			check: func(t *testing.T, base, variant []byte, baseErr, variantErr error) {
				noErrors(t, baseErr, variantErr)
				if got := bootSteps(t, base); got[len(got)-1] != "fragment-step" {
					t.Errorf("append: boot steps %v, want fragment-step last", got)
				}
				if got := bootSteps(t, variant); got[0] != "fragment-step" {
					t.Errorf("prepend: boot steps %v, want fragment-step first", got)
				}
			}},
		"CloudConfigFragments.Content": {base: "cp-k0s", setup: withFragment, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments[0].Content = strings.ReplaceAll(fragStep, "fragment-step", "distinct-content-step")
		}, want: []string{"distinct-content-step"}},
		"CloudConfigFragments.ContentFrom": {base: "wk-k3s", setup: withFragment, mutate: func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments[0].Content = ""
			s.CloudConfigFragments[0].ContentFrom = &bootstrapv1.SecretKeyReference{Name: "fragments", Key: "extra"}
		}, want: []string{"fragment-from-secret"}},
	}
}

func noErrors(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func parse(t *testing.T, doc []byte) *cloudconfig.Config {
	t.Helper()
	c, err := cloudconfig.UnmarshalStrict(doc)
	if err != nil {
		t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
	}
	return c
}

func fileMode(t *testing.T, doc []byte, path string) cloudconfig.Mode {
	t.Helper()
	for _, steps := range parse(t, doc).Stages {
		for _, step := range steps {
			for _, f := range step.Files {
				if f.Path == path {
					return f.Permissions
				}
			}
		}
	}
	t.Fatalf("no file %s in\n%s", path, doc)
	return 0
}

func bootSteps(t *testing.T, doc []byte) []string {
	t.Helper()
	var names []string
	for _, step := range parse(t, doc).Stages[cloudconfig.StageBoot] {
		names = append(names, step.Name)
	}
	if len(names) == 0 {
		t.Fatalf("no boot steps in\n%s", doc)
	}
	return names
}

// grepLine returns the first line of doc that contains sub, for failure messages.
func grepLine(doc []byte, sub string) string {
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if bytes.Contains(l, []byte(sub)) {
			return string(l)
		}
	}
	return ""
}

// specFieldPaths lists the fields of KairosConfigSpec and, one level down, of the structs it
// holds (Install, File, Manifest, DistributionOptions, CloudConfigFragment). Secret references
// are leaves: their resolution is tested through the fields that hold them.
func specFieldPaths() []string {
	refType := reflect.TypeFor[bootstrapv1.SecretKeyReference]()
	var paths []string
	var walk func(prefix string, t reflect.Type, depth int)
	walk = func(prefix string, t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			p := prefix + f.Name
			paths = append(paths, p)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != refType && depth == 0 {
				walk(p+".", ft, depth+1)
			}
		}
	}
	walk("", reflect.TypeFor[bootstrapv1.KairosConfigSpec](), 0)
	return paths
}

// TestNoSpecFieldIsIgnored proves that every spec field reaches the rendered document. A new
// field without a case here fails the test: add a case that shows how the field changes the
// node's data.
func TestNoSpecFieldIsIgnored(t *testing.T) {
	f := testFixture(t)
	cases := fieldCases(f)

	paths := specFieldPaths()
	if len(paths) < 22 {
		t.Fatalf("reflection found only %d fields: %v", len(paths), paths)
	}
	var missing, stale []string
	for _, p := range paths {
		if _, ok := cases[p]; !ok {
			missing = append(missing, p)
		}
	}
	for name := range cases {
		if !slices.Contains(paths, name) {
			stale = append(stale, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("spec fields without a render case (add one to fieldCases): %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("render cases for fields that do not exist: %v", stale)
	}

	for _, name := range paths {
		tc, ok := cases[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			base := baseSpec(tc.base)
			if tc.setup != nil {
				tc.setup(&base)
			}
			variant := *base.DeepCopy()
			tc.mutate(&variant)
			if reflect.DeepEqual(base, variant) {
				t.Fatal("the case does not change the spec")
			}
			baseOut, baseErr := renderSpec(t, base)
			out, err := renderSpec(t, variant)
			if tc.check != nil {
				tc.check(t, baseOut, out, baseErr, err)
				return
			}
			noErrors(t, baseErr, err)
			if bytes.Equal(baseOut, out) {
				t.Fatalf("setting %s does not change the rendered document", name)
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("rendered document does not contain %q:\n%s", w, out)
				}
				if bytes.Contains(baseOut, []byte(w)) {
					t.Errorf("base document already contains %q; the case proves nothing", w)
				}
			}
			parse(t, out)
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	s := baseSpec("cp-k3s")
	s.Files = []bootstrapv1.File{{Path: "/etc/a", Content: "a"}, {Path: "/etc/b", Content: "b"}}
	s.K3s = &bootstrapv1.DistributionOptions{Env: map[string]string{"A": "1", "B": "2", "C": "3", "D": "4"}}
	first, err := renderSpec(t, s)
	noErrors(t, err)
	for range 5 {
		again, err := renderSpec(t, s)
		noErrors(t, err)
		if !bytes.Equal(first, again) {
			t.Fatal("two renders of the same spec differ")
		}
	}
	if !cloudconfig.HasHeader(first) {
		t.Fatalf("document does not start with #cloud-config:\n%s", first)
	}
}

func TestRefOf(t *testing.T) {
	if got := userdata.RefOf(&bootstrapv1.SecretKeyReference{Name: "s"}); got != (userdata.Ref{Name: "s", Key: "value"}) {
		t.Errorf("RefOf without key = %v, want s/value", got)
	}
	if got := userdata.RefOf(&bootstrapv1.SecretKeyReference{Name: "s", Key: "k"}); got != (userdata.Ref{Name: "s", Key: "k"}) {
		t.Errorf("RefOf with key = %v", got)
	}
	if got := (userdata.Ref{Name: "a", Key: "b"}).String(); got != "a/b" {
		t.Errorf("String() = %q, want a/b", got)
	}
}

func TestReferences(t *testing.T) {
	ref := func(name, key string) *bootstrapv1.SecretKeyReference {
		return &bootstrapv1.SecretKeyReference{Name: name, Key: key}
	}
	tests := []struct {
		name string
		spec bootstrapv1.KairosConfigSpec
		want []userdata.Ref
	}{
		{"none", bootstrapv1.KairosConfigSpec{UserPassword: "x", Files: []bootstrapv1.File{{Path: "/a", Content: "x"}}}, nil},
		{"spec order: password, token, files, manifests, fragments", bootstrapv1.KairosConfigSpec{
			CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "f", ContentFrom: ref("frag", "")}},
			Manifests:            []bootstrapv1.Manifest{{Name: "m.yaml", ContentFrom: ref("man", "k")}},
			Files: []bootstrapv1.File{
				{Path: "/b", ContentFrom: ref("file-b", "")},
				{Path: "/inline", Content: "x"},
				{Path: "/a", ContentFrom: ref("file-a", "")},
			},
			WorkerTokenSecretRef:  ref("tok", "t"),
			UserPasswordSecretRef: ref("pw", ""),
		}, []userdata.Ref{
			{Name: "pw", Key: "value"}, {Name: "tok", Key: "t"},
			{Name: "file-b", Key: "value"}, {Name: "file-a", Key: "value"},
			{Name: "man", Key: "k"}, {Name: "frag", Key: "value"},
		}},
		{"duplicates are listed once, the empty key equals value", bootstrapv1.KairosConfigSpec{
			UserPasswordSecretRef: ref("shared", ""),
			Files: []bootstrapv1.File{
				{Path: "/a", ContentFrom: ref("shared", "value")},
				{Path: "/b", ContentFrom: ref("shared", "other")},
				{Path: "/c", ContentFrom: ref("shared", "")},
			},
			Manifests:            []bootstrapv1.Manifest{{Name: "m.yaml", ContentFrom: ref("shared", "other")}},
			CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "f", ContentFrom: ref("shared", "value")}},
		}, []userdata.Ref{{Name: "shared", Key: "value"}, {Name: "shared", Key: "other"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := userdata.References(&tc.spec)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("References() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWorkerTokenOverride(t *testing.T) {
	secrets := map[userdata.Ref]string{{Name: "tok", Key: "value"}: "from-secret", {Name: "tok", Key: "k"}: "from-key"}
	tests := []struct {
		name   string
		spec   bootstrapv1.KairosConfigSpec
		want   string
		wantOK bool
	}{
		{"no override", bootstrapv1.KairosConfigSpec{}, "", false},
		{"inline", bootstrapv1.KairosConfigSpec{WorkerToken: "inline"}, "inline", true},
		{"from a Secret, default key", bootstrapv1.KairosConfigSpec{WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok"}}, "from-secret", true},
		{"from a Secret, explicit key", bootstrapv1.KairosConfigSpec{WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok", Key: "k"}}, "from-key", true},
		{"inline wins", bootstrapv1.KairosConfigSpec{WorkerToken: "inline", WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok"}}, "inline", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := userdata.WorkerTokenOverride(&tc.spec, secrets)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("WorkerTokenOverride() = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestWorkerTokenOverrideReachesTheNode(t *testing.T) {
	f := testFixture(t)
	s := baseSpec("wk-k0s")
	s.WorkerToken = f.k0sWorkerToken
	out, err := renderSpec(t, s)
	noErrors(t, err)
	if !bytes.Contains(out, []byte(f.k0sWorkerToken)) {
		t.Fatal("the k0s worker token override is not in the document")
	}
}

// TestK3sWorkerTokenWithTrailingNewline: admission accepts a k3s agent token with a trailing
// newline (a Secret created from a server's /var/lib/rancher/k3s/server/agent-token has one),
// so rendering must accept it too.
func TestK3sWorkerTokenWithTrailingNewline(t *testing.T) {
	f := testFixture(t)
	for _, viaSecret := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "from a Secret"}[viaSecret], func(t *testing.T) {
			s := baseSpec("wk-k3s")
			in := inputsFor(f, &s)
			if viaSecret {
				s.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "tok-nl"}
				in.Secrets[userdata.Ref{Name: "tok-nl", Key: "value"}] = f.k3sOverride + "\n"
			} else {
				s.WorkerToken = f.k3sOverride + "\n"
			}
			s.Default()
			if errs := validation.ValidateKairosConfigSpec(&s, nil).ToAggregate(); errs != nil {
				t.Fatalf("admission rejects the token: %v", errs)
			}
			tok, _ := userdata.WorkerTokenOverride(&s, in.Secrets)
			in.JoinToken = tok
			out, err := userdata.Render(&s, in)
			if err != nil {
				t.Fatalf("viaSecret=%v: admission accepts the token but rendering fails: %v", viaSecret, err)
			}
			if !bytes.Contains(out, []byte(f.k3sOverride)) {
				t.Fatalf("viaSecret=%v: the token is not in the document", viaSecret)
			}
		})
	}
}

func TestSecretContentMissing(t *testing.T) {
	f := testFixture(t)
	ref := &bootstrapv1.SecretKeyReference{Name: "absent", Key: "key"}
	tests := []struct {
		name   string
		base   string
		mutate specField
		want   []string
	}{
		{"password", "wk-k0s", func(s *bootstrapv1.KairosConfigSpec) { s.UserPassword = ""; s.UserPasswordSecretRef = ref },
			[]string{"absent/key", "was not provided"}},
		{"file", "wk-k0s", func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/x", ContentFrom: ref}}
		}, []string{"file /etc/x", "absent/key"}},
		{"manifest", "cp-k0s", func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "m.yaml", ContentFrom: ref}}
		}, []string{"manifest m.yaml", "absent/key"}},
		{"fragment", "wk-k3s", func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "frag", ContentFrom: ref}}
		}, []string{"cloud-config fragment frag", "absent/key"}},
		{"default key of a known Secret", "wk-k0s", func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/y", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "pw", Key: "other"}}}
		}, []string{"file /etc/y", "pw/other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(tc.base)
			tc.mutate(&s)
			s.Default()
			_, err := userdata.Render(&s, inputsFor(f, &s))
			if err == nil {
				t.Fatal("rendering with a missing Secret key succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFilePermissions(t *testing.T) {
	tests := []struct {
		perm    string
		want    cloudconfig.Mode
		wantErr string
	}{
		{"", 0o600, ""},
		{"0644", 0o644, ""},
		{"644", 0o644, ""},
		{"0755", 0o755, ""},
		{"0400", 0o400, ""},
		{"0999", 0, `permissions "0999" are not octal`},
		{"rw-r", 0, `permissions "rw-r" are not octal`},
		{"-644", 0, "not octal"},
	}
	for _, tc := range tests {
		t.Run(tc.perm, func(t *testing.T) {
			s := baseSpec("wk-k0s")
			s.Files = []bootstrapv1.File{{Path: "/etc/p", Content: "x", Permissions: tc.perm}}
			out, err := renderSpec(t, s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "file /etc/p") {
					t.Fatalf("error = %v, want one naming the file and containing %q", err, tc.wantErr)
				}
				return
			}
			noErrors(t, err)
			if got := fileMode(t, out, "/etc/p"); got != tc.want {
				t.Fatalf("mode = %#o, want %#o", got, tc.want)
			}
		})
	}
}

// TestManifestFileName: spec.manifests[].name is a file name such as cni.yaml (the API
// requires the .yaml/.yml extension), so the node must get <manifest dir>/cni.yaml, not
// cni.yaml.yaml.
func TestManifestFileName(t *testing.T) {
	for _, name := range []string{"cni.yaml", "cni.yml"} {
		t.Run(name, func(t *testing.T) {
			s := baseSpec("cp-k0s")
			s.Manifests = []bootstrapv1.Manifest{{Name: name, Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n"}}
			out, err := renderSpec(t, s)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(out, []byte(".yaml.yaml")) || bytes.Contains(out, []byte(".yml.yaml")) {
				t.Fatalf("manifest %s is written with a doubled extension:\n%s", name, grepLine(out, render.K0sManifestDir))
			}
		})
	}
}

// TestValidManifestNamesRender: every manifest name admission's own validation accepts must
// render, and names the renderer would refuse (upper case) are refused by validation already.
func TestValidManifestNamesRender(t *testing.T) {
	for _, name := range []string{"CNI.yaml", "cni.yaml", "my-app.yml", "a.b_c.yaml", "Upper.yml"} {
		s := baseSpec("cp-k0s")
		s.Manifests = []bootstrapv1.Manifest{{Name: name, Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n"}}
		d := s.DeepCopy()
		d.Default()
		accepted := validation.ValidateKairosConfigSpec(d, nil).ToAggregate() == nil
		_, err := renderSpec(t, s)
		if accepted && err != nil {
			t.Errorf("validation accepts manifest %q but rendering fails: %v", name, err)
		}
		if !accepted && name == strings.ToLower(name) {
			t.Errorf("validation refuses the lower-case manifest name %q", name)
		}
	}
}

func TestNodeMapsInstallAndOptions(t *testing.T) {
	f := testFixture(t)
	s := baseSpec("wk-k3s")
	s.Install = &bootstrapv1.Install{Device: "/dev/sda"} // Auto unset: the installer runs unattended
	s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--k0s-only"}}
	s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--k3s-only"}}
	s.Default()
	in := inputsFor(f, &s)
	node, fragments, err := userdata.Node(&s, in)
	noErrors(t, err)
	if node.Install == nil || !node.Install.Auto || node.Install.Device != "/dev/sda" {
		t.Errorf("Install = %+v, want auto install to /dev/sda", node.Install)
	}
	if !reflect.DeepEqual(node.Args, []string{"--k3s-only"}) {
		t.Errorf("Args = %v, want only the options of the node's distribution", node.Args)
	}
	if len(fragments) != 0 {
		t.Errorf("fragments = %v, want none", fragments)
	}
	if node.JoinToken != f.k3sAgentToken || node.ClusterName != "demo" || node.Endpoint.Host != "192.0.2.10" {
		t.Errorf("inputs not mapped: %+v", node)
	}
	if len(node.Users) != 1 || node.Users[0].Name != "kairos" || node.Users[0].Password != "base-password" {
		t.Errorf("Users = %+v", node.Users)
	}
}

// TestSSHKeyWithTrailingNewline: admission accepts a key pasted with its trailing newline
// (a YAML block scalar or `cat key.pub`), so rendering must accept it too.
func TestSSHKeyWithTrailingNewline(t *testing.T) {
	s := baseSpec("wk-k0s")
	s.SSHPublicKey = sshKey + "\n"
	if errs := func() error {
		d := s.DeepCopy()
		d.Default()
		return validation.ValidateKairosConfigSpec(d, nil).ToAggregate()
	}(); errs != nil {
		t.Fatalf("admission rejects the key: %v", errs)
	}
	out, err := renderSpec(t, s)
	if err != nil {
		t.Fatalf("admission accepts the key but rendering fails: %v", err)
	}
	if !bytes.Contains(out, []byte(sshKey)) {
		t.Fatal("the key is not in the document")
	}
}
