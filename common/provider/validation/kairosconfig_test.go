package validation_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
)

// Well-formed values for the fields whose format is checked.
var (
	validSSHKey   = "ssh-ed25519 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 51)) + " me@host"
	validK3sToken = "K10" + strings.Repeat("ab", 32) + "::server:0123456789abcdef"
	validK0sToken = gzipBase64("apiVersion: v1\nkind: Config\n")
)

// gzipBase64 builds a value with the outer encoding of a k0s join token.
func gzipBase64(s string) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func boolPtr(b bool) *bool { return &b }

func secretRef(name, key string) *bootstrapv1.SecretKeyReference {
	return &bootstrapv1.SecretKeyReference{Name: name, Key: key}
}

func spec(role bootstrapv1.Role, dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	s := bootstrapv1.KairosConfigSpec{Role: role, Distribution: dist, KubernetesVersion: "v1.31.2", UserPassword: "s3cret"}
	s.Default()
	return s
}

func cpK0s() bootstrapv1.KairosConfigSpec {
	return spec(bootstrapv1.RoleControlPlane, bootstrapv1.DistributionK0s)
}
func cpK3s() bootstrapv1.KairosConfigSpec {
	return spec(bootstrapv1.RoleControlPlane, bootstrapv1.DistributionK3s)
}
func wkK0s() bootstrapv1.KairosConfigSpec {
	return spec(bootstrapv1.RoleWorker, bootstrapv1.DistributionK0s)
}
func wkK3s() bootstrapv1.KairosConfigSpec {
	return spec(bootstrapv1.RoleWorker, bootstrapv1.DistributionK3s)
}

// wantErr describes one expected field error: its exact path, its type, and substrings of its
// detail that tell the user how to fix it.
type wantErr struct {
	field    string
	typ      field.ErrorType
	contains []string
}

func e(path string, typ field.ErrorType, contains ...string) wantErr {
	return wantErr{field: path, typ: typ, contains: contains}
}

type validationCase struct {
	name   string
	base   func() bootstrapv1.KairosConfigSpec
	mutate func(*bootstrapv1.KairosConfigSpec)
	// want nil means the spec is valid.
	want []wantErr
}

func validationCases() []validationCase {
	frag := func(name, content string) bootstrapv1.CloudConfigFragment {
		return bootstrapv1.CloudConfigFragment{Name: name, Position: bootstrapv1.FragmentAppend, Content: content}
	}
	cases := []validationCase{
		// role
		{"role unknown", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Role = "master" },
			[]wantErr{e("spec.role", field.ErrorTypeNotSupported, `"control-plane"`, `"worker"`)}},
		{"role worker", wkK0s, nil, nil},
		{"role control-plane", cpK0s, nil, nil},

		// distribution
		{"distribution unknown", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Distribution = "rke2" },
			[]wantErr{e("spec.distribution", field.ErrorTypeNotSupported, `"k0s"`, `"k3s"`)}},
		{"distribution k3s", cpK3s, nil, nil},

		// kubernetesVersion
		{"version without v", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "1.31.2" },
			[]wantErr{e("spec.kubernetesVersion", field.ErrorTypeInvalid, "leading v, for example v1.31.2")}},
		{"version without patch", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.31" },
			[]wantErr{e("spec.kubernetesVersion", field.ErrorTypeInvalid, "semantic version")}},
		{"version with leading zero", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.031.2" },
			[]wantErr{e("spec.kubernetesVersion", field.ErrorTypeInvalid, "for example v1.31.2")}},
		{"version with distribution suffix", cpK3s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.31.2+k3s1" }, nil},
		{"version with pre-release and build", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "v1.31.2-rc.1+k0s.0" }, nil},
		{"version empty (taken from the Machine)", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "" }, nil},

		// singleNode
		{"single-node worker", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SingleNode = true },
			[]wantErr{e("spec.singleNode", field.ErrorTypeForbidden, "remove singleNode or set role: control-plane")}},
		{"single-node control plane", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SingleNode = true }, nil},

		// userName
		{"user name upper case", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "Root" },
			[]wantErr{e("spec.userName", field.ErrorTypeInvalid, "must be a Linux user name", "lower case letters")}},
		{"user name starting with a digit", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "1kairos" },
			[]wantErr{e("spec.userName", field.ErrorTypeInvalid, "starting with a letter or _")}},
		{"user name too long", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserName = strings.Repeat("a", 33) },
			[]wantErr{e("spec.userName", field.ErrorTypeInvalid, "at most 32 characters")}},
		{"user name empty (not defaulted)", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "" },
			[]wantErr{e("spec.userName", field.ErrorTypeInvalid, "Linux user name")}},
		{"user name with underscore, digit and hyphen", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserName = "_svc-1" }, nil},

		// userPassword / userPasswordSecretRef
		{"password and password Secret", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserPasswordSecretRef = secretRef("pw", "value") },
			[]wantErr{e("spec.userPassword", field.ErrorTypeForbidden, "mutually exclusive", "keep only userPasswordSecretRef")}},
		{"password Secret only", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = ""
			s.UserPasswordSecretRef = secretRef("pw", "value")
		}, nil},
		{"password Secret name", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = ""
			s.UserPasswordSecretRef = secretRef("Bad_Name", "value")
		}, []wantErr{e("spec.userPasswordSecretRef.name", field.ErrorTypeInvalid, "must be the name of a Secret in this namespace")}},
		{"password Secret key", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = ""
			s.UserPasswordSecretRef = secretRef("pw", "bad key!")
		}, []wantErr{e("spec.userPasswordSecretRef.key", field.ErrorTypeInvalid, "must be a key of the Secret's data")}},
		{"password Secret dotted key", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = ""
			s.UserPasswordSecretRef = secretRef("node-password", "pass.word_1-x")
		}, nil},

		// userGroups
		{"group name upper case", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserGroups = []string{"admin", "Wheel"} },
			[]wantErr{e("spec.userGroups[1]", field.ErrorTypeInvalid, "must be a Linux group name")}},
		{"groups", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.UserGroups = []string{"wheel", "docker", "_x-1"} }, nil},

		// githubUser
		{"github user with prefix", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "github:octocat" },
			[]wantErr{e("spec.githubUser", field.ErrorTypeInvalid, "without the github: prefix")}},
		{"github user double hyphen", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "octo--cat" },
			[]wantErr{e("spec.githubUser", field.ErrorTypeInvalid, "single hyphens")}},
		{"github user too long", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = strings.Repeat("a", 40) },
			[]wantErr{e("spec.githubUser", field.ErrorTypeInvalid, "at most 39 characters")}},
		{"github user", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.GithubUser = "octo-cat1" }, nil},

		// sshPublicKey
		{"ssh key one word", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "not-a-key" },
			[]wantErr{e("spec.sshPublicKey", field.ErrorTypeInvalid, "authorized_keys format", "ssh-ed25519 AAAA")}},
		{"ssh key unsupported type", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "ssh-dss AAAAB3NzaC1kc3M= me" },
			[]wantErr{e("spec.sshPublicKey", field.ErrorTypeInvalid, `unsupported key type "ssh-dss"`, "use one of ssh-rsa, ssh-ed25519")}},
		{"ssh key material not base64", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = "ssh-ed25519 !!!! me" },
			[]wantErr{e("spec.sshPublicKey", field.ErrorTypeInvalid, "not valid base64", "paste the whole line of the .pub file")}},
		{"ssh key twice", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = validSSHKey + "\n" + validSSHKey },
			[]wantErr{e("spec.sshPublicKey", field.ErrorTypeInvalid, "more than one key", "use githubUser, or one key here")}},
		{"ssh key", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = validSSHKey }, nil},
		{"ssh key with trailing newline", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.SSHPublicKey = validSSHKey + "\n" }, nil},

		// workerToken / workerTokenSecretRef
		{"worker token and worker token Secret", wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.WorkerToken = validK3sToken
			s.WorkerTokenSecretRef = secretRef("tok", "value")
		}, []wantErr{e("spec.workerToken", field.ErrorTypeForbidden, "mutually exclusive", "keep only workerTokenSecretRef")}},
		{"worker token on a control plane", cpK3s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = validK3sToken },
			[]wantErr{e("spec.workerToken", field.ErrorTypeForbidden, "only workers use a worker token: remove it")}},
		{"worker token Secret on a control plane", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerTokenSecretRef = secretRef("tok", "value") },
			[]wantErr{e("spec.workerTokenSecretRef", field.ErrorTypeForbidden, "only workers use a worker token: remove it")}},
		{"k0s worker token not a join token", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = "abcdef.0123456789abcdef" },
			[]wantErr{e("spec.workerToken", field.ErrorTypeInvalid, "not a k0s join token", "k0s token create --role=worker")}},
		{"k0s worker token base64 but not gzip", wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.WorkerToken = base64.StdEncoding.EncodeToString([]byte("plain text"))
		}, []wantErr{e("spec.workerToken", field.ErrorTypeInvalid, "leave it empty to let the provider generate one")}},
		{"k3s worker token not secure", wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = "my-plain-token" },
			[]wantErr{e("spec.workerToken", field.ErrorTypeInvalid, "not a k3s secure agent token", "copy it from a server")}},
		{"k3s worker token with a short CA hash", wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = "K10abc::server:x" },
			[]wantErr{e("spec.workerToken", field.ErrorTypeInvalid, "k3s secure agent token")}},
		{"worker token Secret name", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerTokenSecretRef = secretRef("Tok!", "value") },
			[]wantErr{e("spec.workerTokenSecretRef.name", field.ErrorTypeInvalid, "name of a Secret")}},
		{"k0s worker token", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = validK0sToken }, nil},
		{"k0s worker token with surrounding whitespace", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = "\n" + validK0sToken + "\n" }, nil},
		{"k3s worker token", wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = validK3sToken }, nil},
		{"k3s worker token with trailing newline", wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerToken = validK3sToken + "\n" }, nil},
		{"worker token Secret", wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.WorkerTokenSecretRef = secretRef("tok", "token") }, nil},

		// manifests
		{"manifests on a worker", wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "kind: ConfigMap"}}
		}, []wantErr{e("spec.manifests", field.ErrorTypeForbidden, "move them to the control-plane KairosConfig")}},
		{"manifest name with a directory", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "dir/a.yaml", Content: "a: b"}}
		}, []wantErr{e("spec.manifests[0].name", field.ErrorTypeInvalid, "without directories, for example cni.yaml")}},
		{"manifest name without extension", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "cni", Content: "a: b"}}
		}, []wantErr{e("spec.manifests[0].name", field.ErrorTypeInvalid, "ending in .yaml or .yml")}},
		{"manifest name twice", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: b"}, {Name: "a.yaml", Content: "c: d"}}
		}, []wantErr{e("spec.manifests[1].name", field.ErrorTypeDuplicate)}},
		{"manifest content and contentFrom", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", Content: "a: b", ContentFrom: secretRef("m", "value")}}
		}, []wantErr{e("spec.manifests[0].contentFrom", field.ErrorTypeForbidden, "mutually exclusive: keep one")}},
		{"manifest without content", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml"}}
		}, []wantErr{e("spec.manifests[0].content", field.ErrorTypeRequired, "set content, or contentFrom to read it from a Secret")}},
		{"manifest Secret name", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "a.yaml", ContentFrom: secretRef("Bad Name", "value")}}
		}, []wantErr{e("spec.manifests[0].contentFrom.name", field.ErrorTypeInvalid, "name of a Secret")}},
		{"manifests", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{
				{Name: "cni.yaml", Content: "kind: A\n---\nkind: B\n"},
				{Name: "b.yml", ContentFrom: secretRef("m", "value")},
			}
		}, nil},

		// files
		{"file path relative", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "etc/motd", Content: "x"}} },
			[]wantErr{e("spec.files[0].path", field.ErrorTypeInvalid, "absolute, clean file path such as /etc/myapp/config.yaml")}},
		{"file path unclean", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/../motd", Content: "x"}}
		},
			[]wantErr{e("spec.files[0].path", field.ErrorTypeInvalid, "absolute, clean")}},
		{"file path a directory", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "/etc/", Content: "x"}} },
			[]wantErr{e("spec.files[0].path", field.ErrorTypeInvalid, "absolute, clean")}},
		{"file path twice", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "a"}, {Path: "/etc/motd", Content: "b"}}
		}, []wantErr{e("spec.files[1].path", field.ErrorTypeDuplicate)}},
		{"file owner without group", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Owner: "root", Content: "x"}}
		}, []wantErr{e("spec.files[0].owner", field.ErrorTypeInvalid, `must be "user:group", for example root:root or 1000:1000`)}},
		{"file owner mixed", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Owner: "root:0", Content: "x"}}
		}, []wantErr{e("spec.files[0].owner", field.ErrorTypeInvalid, `"user:group"`)}},
		{"file owner id beyond 32 bits", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Owner: "4294967296:0", Content: "x"}}
		}, []wantErr{e("spec.files[0].owner", field.ErrorTypeInvalid, "a numeric id is at most 4294967294: the kernel keeps only 32 bits of an id")}},
		{"file permissions symbolic", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Permissions: "rw-r", Content: "x"}}
		}, []wantErr{e("spec.files[0].permissions", field.ErrorTypeInvalid, `octal file permissions such as "0644" or "0600"`)}},
		{"file permissions not octal", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Permissions: "0999", Content: "x"}}
		}, []wantErr{e("spec.files[0].permissions", field.ErrorTypeInvalid, "octal")}},
		{"file content and contentFrom", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", Content: "x", ContentFrom: secretRef("f", "value")}}
		}, []wantErr{e("spec.files[0].contentFrom", field.ErrorTypeForbidden, "keep one")}},
		{"file without content", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = []bootstrapv1.File{{Path: "/etc/motd"}} },
			[]wantErr{e("spec.files[0].content", field.ErrorTypeRequired, "set content, or contentFrom")}},
		{"file Secret key", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: "/etc/motd", ContentFrom: secretRef("f", "a/b")}}
		}, []wantErr{e("spec.files[0].contentFrom.key", field.ErrorTypeInvalid, "key of the Secret's data")}},
		{"files", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{
				{Path: "/etc/motd", Owner: "root:root", Permissions: "0644", Content: "x"},
				{Path: "/home/kairos/a", Owner: "1000:1000", Permissions: "600", Content: "x"},
				{Path: "/etc/b", Owner: "kairos:admin", ContentFrom: secretRef("f", "value")},
			}
		}, nil},

		// image
		{"image of the spec's distribution and version", cpK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
		}, nil},
		{"k0s image pinned build", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.KubernetesVersion = "v1.31.2+k0s"
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.31.2-k0s.1"
		}, nil},
		{"image without a version to check", cpK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Image = "registry.local:5000/edge/node@sha256:" + strings.Repeat("ab", 32)
		}, nil},
		{"image checked by distribution only without kubernetesVersion", wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.KubernetesVersion = ""
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.37.0-k0s.0"
		}, nil},
		{"image not a reference", cpK3s, func(s *bootstrapv1.KairosConfigSpec) { s.Image = "Quay.io/Kairos Ubuntu" },
			[]wantErr{e("spec.image", field.ErrorTypeInvalid, "OCI image reference", "quay.io/kairos/ubuntu:")}},
		{"image of the other distribution", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
		}, []wantErr{e("spec.image", field.ErrorTypeInvalid, "ships k3s v1.31.2+k3s1", "distribution is k0s", "use a k0s image")}},
		{"image of another version", wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.32.0-k3s1"
		}, []wantErr{e("spec.image", field.ErrorTypeInvalid, "ships k3s v1.32.0+k3s1", "spec.kubernetesVersion is v1.31.2", "change spec.kubernetesVersion to v1.32.0")}},
		{"image of another build than pinned", cpK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.KubernetesVersion = "v1.31.2+k3s2"
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
		}, []wantErr{e("spec.image", field.ErrorTypeInvalid, "spec.kubernetesVersion is v1.31.2+k3s2")}},

		// hostname / hostnamePrefix
		{"hostname and prefix", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			s.Hostname, s.HostnamePrefix = "node", "node-"
		},
			[]wantErr{e("spec.hostnamePrefix", field.ErrorTypeForbidden, "mutually exclusive", "use hostnamePrefix only")}},
		{"hostname not a DNS label", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "Bad_Host" },
			[]wantErr{e("spec.hostname", field.ErrorTypeInvalid, "RFC 1123 label", "'my-name'")}},
		{"hostname with a dot", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "node.example.com" },
			[]wantErr{e("spec.hostname", field.ErrorTypeInvalid, "must not contain dots")}},
		{"hostname prefix not a DNS label", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			s.HostnamePrefix = "bad_"
		},
			[]wantErr{e("spec.hostnamePrefix", field.ErrorTypeInvalid, "RFC 1123 label")}},
		{"hostname prefix starting with a hyphen", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			s.HostnamePrefix = "-node"
		},
			[]wantErr{e("spec.hostnamePrefix", field.ErrorTypeInvalid, "RFC 1123 label")}},
		{"hostname", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Hostname = "node-1" }, nil},
		{"hostname prefix with provider IDs from the Machine", cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.HostnamePrefix = "node-" },
			[]wantErr{e("spec.hostnamePrefix", field.ErrorTypeForbidden, "named after its Machine", "set providerID.source to Distribution")}},
		{"hostname prefix ending with a hyphen", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			s.HostnamePrefix = "node-"
		}, nil},

		// install
		{"install reboot and poweroff", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(true), Device: "auto", Reboot: boolPtr(true), Poweroff: true}
		}, []wantErr{e("spec.install.poweroff", field.ErrorTypeForbidden, "mutually exclusive", "keep reboot")}},
		{"install device name only", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(true), Device: "sda"}
		}, []wantErr{e("spec.install.device", field.ErrorTypeInvalid, "must be auto or a device path such as /dev/sda")}},
		{"install device unclean", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(true), Device: "/dev/../sda"}
		}, []wantErr{e("spec.install.device", field.ErrorTypeInvalid, "/dev/disk/by-id/")}},
		{"install auto", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(true), Device: "auto", Reboot: boolPtr(true)}
		}, nil},
		{"install that neither reboots nor powers off", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(true), Device: "auto", Reboot: boolPtr(false)}
		}, []wantErr{e("spec.install.reboot", field.ErrorTypeInvalid, "stay in the live installer", "defaults to true")}},
		{"manual install without reboot", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(false), Device: "auto", Reboot: boolPtr(false)}
		}, nil},
		{"install by-id device, poweroff", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Auto: boolPtr(false), Device: "/dev/disk/by-id/nvme-x", Poweroff: true}
		}, nil},

		// k0s / k3s options
		{"k0s options on k3s", cpK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		},
			[]wantErr{e("spec.k0s", field.ErrorTypeForbidden, "do not apply to distribution k3s", "move them to spec.k3s or set distribution: k0s")}},
		{"k3s options on k0s", wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--debug"}}
		},
			[]wantErr{e("spec.k3s", field.ErrorTypeForbidden, "do not apply to distribution k0s", "move them to spec.k0s or set distribution: k3s")}},
		{"k0s env name", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Env: map[string]string{"1BAD": "x", "GOOD_1": "y"}}
		}, []wantErr{e("spec.k0s.env[1BAD]", field.ErrorTypeInvalid, "must be an environment variable name")}},
		{"k3s env name", wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Env: map[string]string{"A-B": "x"}}
		}, []wantErr{e("spec.k3s.env[A-B]", field.ErrorTypeInvalid, "letters, digits and _")}},
		{"k0s config on a worker", wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Config: "spec: {}"}
		}, []wantErr{e("spec.k0s.config", field.ErrorTypeForbidden, "remove it from worker configs")}},
		{"k0s options on a control plane", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{
				Args:   []string{"--debug", "--labels=a=b", "--single-node-thing"},
				Env:    map[string]string{"HTTP_PROXY": "http://proxy:3128"},
				Config: "spec:\n  network:\n    provider: calico\n",
			}
		}, nil},
		{"k3s options on a worker", wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--node-label=a=b"}, Config: "node-label: [a=b]\n"}
		}, nil},

		// cloudConfigFragments
		{"fragment name twice", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{frag("f", "a: b"), frag("f", "c: d")}
		}, []wantErr{e("spec.cloudConfigFragments[1].name", field.ErrorTypeDuplicate)}},
		{"fragment position unknown", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			f := frag("f", "a: b")
			f.Position = "middle"
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{f}
		}, []wantErr{e("spec.cloudConfigFragments[0].position", field.ErrorTypeNotSupported, `"append"`, `"prepend"`)}},
		{"fragment content and contentFrom", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			f := frag("f", "a: b")
			f.ContentFrom = secretRef("frag", "value")
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{f}
		}, []wantErr{e("spec.cloudConfigFragments[0].contentFrom", field.ErrorTypeForbidden, "keep one")}},
		{"fragment without content", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{frag("f", "")}
		}, []wantErr{e("spec.cloudConfigFragments[0].content", field.ErrorTypeRequired, "set content, or contentFrom")}},
		{"fragments", cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			f2 := frag("early", "#cloud-config\nstages:\n  boot:\n    - name: hello\n      commands: [echo hi]\n")
			f2.Position = bootstrapv1.FragmentPrepend
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{
				frag("motd", "#cloud-config\nwrite_files: []\n"),
				f2,
				{Name: "secret", Position: bootstrapv1.FragmentAppend, ContentFrom: secretRef("frag", "value")},
			}
		}, nil},
	}

	// Flags the provider manages, keys fragments may not set, what a node reads in fragments,
	// manifests and distribution configuration: common/render checks those for every source
	// (see its TestRefusedInputs), and admission reaches them through the dry render
	// (internal/webhooks TestDryRender).
	return cases
}

func checkErrors(t *testing.T, errs field.ErrorList, want []wantErr) {
	t.Helper()
	remaining := append(field.ErrorList(nil), errs...)
	for _, w := range want {
		found := -1
		for i, err := range remaining {
			if err.Field == w.field && err.Type == w.typ {
				found = i
				break
			}
		}
		if found < 0 {
			t.Errorf("missing error %s (%s); got:\n%s", w.field, w.typ, errs.ToAggregate())
			continue
		}
		err := remaining[found]
		remaining = append(remaining[:found], remaining[found+1:]...)
		for _, s := range w.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err.Error(), s)
			}
		}
	}
	for _, err := range remaining {
		t.Errorf("unexpected error: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range validationCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.base()
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			checkErrors(t, validation.ValidateKairosConfigSpec(&s, field.NewPath("spec")), tc.want)
		})
	}
}

// TestValidateCoversEveryField keeps the table honest: every validated field has a case that
// makes it fail.
func TestValidateCoversEveryField(t *testing.T) {
	failing := map[string]bool{}
	for _, tc := range validationCases() {
		for _, w := range tc.want {
			top, _, _ := strings.Cut(strings.TrimPrefix(w.field, "spec."), ".")
			top, _, _ = strings.Cut(top, "[")
			failing[top] = true
		}
	}
	for _, f := range []string{
		"role", "distribution", "kubernetesVersion", "singleNode", "userName", "userPassword",
		"userPasswordSecretRef", "userGroups", "githubUser", "sshPublicKey", "workerToken",
		"workerTokenSecretRef", "manifests", "files", "hostname", "hostnamePrefix", "install",
		"k0s", "k3s", "cloudConfigFragments", "image",
	} {
		if !failing[f] {
			t.Errorf("no failing validation case for spec.%s", f)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := wkK0s()
	s.Role = "master"
	s.KubernetesVersion = "latest"
	s.UserName = "Root"
	s.Hostname = "a_b"
	s.Files = []bootstrapv1.File{{Path: "rel"}}
	checkErrors(t, validation.ValidateKairosConfigSpec(&s, field.NewPath("spec")), []wantErr{
		e("spec.role", field.ErrorTypeNotSupported),
		e("spec.kubernetesVersion", field.ErrorTypeInvalid),
		e("spec.userName", field.ErrorTypeInvalid),
		e("spec.hostname", field.ErrorTypeInvalid),
		e("spec.files[0].path", field.ErrorTypeInvalid),
		e("spec.files[0].content", field.ErrorTypeRequired),
	})
}

func TestValidateUsesTheGivenPath(t *testing.T) {
	s := cpK0s()
	s.SingleNode = true
	s.Role = bootstrapv1.RoleWorker
	s.Files = []bootstrapv1.File{{Path: "/a", Content: "x", Permissions: "x"}}
	checkErrors(t, validation.ValidateKairosConfigSpec(&s, field.NewPath("spec", "template", "spec")), []wantErr{
		e("spec.template.spec.singleNode", field.ErrorTypeForbidden, "set role: control-plane"),
		e("spec.template.spec.files[0].permissions", field.ErrorTypeInvalid),
	})
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		path *field.Path
		spec func() bootstrapv1.KairosConfigSpec
		want [][]string // each warning's expected substrings, in order
	}{
		{"default password", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := bootstrapv1.KairosConfigSpec{}
			s.Default()
			return s
		}, [][]string{{"spec.userPassword:", `login user "kairos"`, `development password "kairos"`, "spec.userPasswordSecretRef", "spec.githubUser", "spec.sshPublicKey"}}},
		{"default password on a template names the template path and user", field.NewPath("spec", "template", "spec"), func() bootstrapv1.KairosConfigSpec {
			s := bootstrapv1.KairosConfigSpec{UserName: "ops", UserPassword: bootstrapv1.DefaultUserPassword}
			s.Default()
			return s
		}, [][]string{{"spec.template.spec.userPassword:", `login user "ops"`, "spec.template.spec.userPasswordSecretRef"}}},
		{"own password", field.NewPath("spec"), cpK0s, nil},
		{"password from a Secret", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: secretRef("pw", "")}
			s.Default()
			return s
		}, nil},
		{"plain-text worker token", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := wkK3s()
			s.WorkerToken = validK3sToken
			return s
		}, [][]string{{"spec.workerToken is stored in plain text", "prefer spec.workerTokenSecretRef"}}},
		{"worker token from a Secret", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := wkK3s()
			s.WorkerTokenSecretRef = secretRef("tok", "value")
			return s
		}, nil},
		{"a VRRP router ID on k3s has no effect", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := cpK3s()
			s.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10", VirtualRouterID: 77}
			return s
		}, [][]string{{"spec.virtualIP.virtualRouterID has no effect with k3s", "kube-vip"}}},
		{"a VRRP router ID on k0s is used", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := cpK0s()
			s.VirtualIP = &bootstrapv1.VirtualIP{Address: "192.0.2.10", VirtualRouterID: 77}
			return s
		}, nil},
		{"an image whose tag names no version cannot be checked", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := cpK3s()
			s.Image = "registry.local:5000/edge/node:2026.11"
			return s
		}, [][]string{{`spec.image "registry.local:5000/edge/node:2026.11" names no Kairos distribution version`, "cannot be checked", "upgrades to it once before k3s starts", "only if the version it ships matches"}}},
		{"an image of standard naming is checked, not warned about", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := cpK3s()
			s.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
			return s
		}, nil},
		{"both warnings", field.NewPath("spec"), func() bootstrapv1.KairosConfigSpec {
			s := bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, WorkerToken: validK0sToken}
			s.Default()
			return s
		}, [][]string{{"spec.userPassword"}, {"spec.workerToken"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec()
			got := validation.KairosConfigSpecWarnings(&s, tc.path)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d warnings %q, want %d", len(got), got, len(tc.want))
			}
			for i, subs := range tc.want {
				for _, sub := range subs {
					if !strings.Contains(got[i], sub) {
						t.Errorf("warning %q does not contain %q", got[i], sub)
					}
				}
			}
		})
	}
}

// TestMessagesNeverContainSecrets checks every error and warning produced for specs holding
// distinctive secret values: none may echo the password or the worker token, not even in the
// "Invalid value" part of the message.
func TestMessagesNeverContainSecrets(t *testing.T) {
	const (
		password = "pw-CANARY-7f3a9c-secret"
		marker   = "CANARY"
	)
	k3sToken := "K10" + strings.Repeat("cd", 32) + "::server:tok-CANARY-b81e44"
	badK3sToken := "tok-CANARY-k3s-not-secure"
	k0sLikeToken := gzipBase64("CANARY") // valid outer format, the value itself is secret
	badK0sToken := "tok-CANARY.notajointoken"

	specs := map[string]bootstrapv1.KairosConfigSpec{}
	add := func(name string, base func() bootstrapv1.KairosConfigSpec, mutate func(*bootstrapv1.KairosConfigSpec)) {
		s := base()
		mutate(&s)
		specs[name] = s
	}
	for _, pw := range []string{password, password + "\n", " " + password} {
		add("password and Secret "+fmt.Sprintf("%q", pw), cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = pw
			s.UserPasswordSecretRef = secretRef("Bad_Name", "bad key!")
		})
		add("password with invalid user "+fmt.Sprintf("%q", pw), cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.UserPassword = pw
			s.UserName = "Bad User"
			s.UserGroups = []string{"Bad"}
		})
	}
	for name, tok := range map[string]string{"k3s": k3sToken, "bad k3s": badK3sToken, "k0s": k0sLikeToken, "bad k0s": badK0sToken} {
		for _, base := range []func() bootstrapv1.KairosConfigSpec{cpK0s, cpK3s, wkK0s, wkK3s} {
			add(name+" token with Secret", base, func(s *bootstrapv1.KairosConfigSpec) {
				s.UserPassword = password
				s.WorkerToken = tok
				s.WorkerTokenSecretRef = secretRef("Tok_Bad", "a b")
			})
			add(name+" token alone", base, func(s *bootstrapv1.KairosConfigSpec) {
				s.UserPassword = password
				s.WorkerToken = tok
			})
			add(name+" token with whitespace", base, func(s *bootstrapv1.KairosConfigSpec) {
				s.UserPassword = password
				s.WorkerToken = " " + tok + "\n"
				s.Distribution = "rke2"
			})
		}
	}

	checked := 0
	for name, s := range specs {
		errs := validation.ValidateKairosConfigSpec(&s, field.NewPath("spec"))
		var texts []string
		texts = append(texts, validation.KairosConfigSpecWarnings(&s, field.NewPath("spec"))...)
		for _, err := range errs {
			texts = append(texts, err.Error(), err.Detail, fmt.Sprintf("%v", err.BadValue))
		}
		if agg := errs.ToAggregate(); agg != nil {
			texts = append(texts, agg.Error())
		}
		for _, text := range texts {
			checked++
			if strings.Contains(text, marker) || strings.Contains(text, password) ||
				strings.Contains(text, k3sToken) || strings.Contains(text, k0sLikeToken) {
				t.Errorf("%s: message leaks secret material: %q", name, text)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d messages checked; the test lost its cases", checked)
	}
}

func TestValidateSharedKairosConfigSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec bootstrapv1.KairosConfigSpec
		want []wantErr
	}{
		{"literal hostname", bootstrapv1.KairosConfigSpec{Hostname: "node-1"},
			[]wantErr{e("spec.template.spec.hostname", field.ErrorTypeForbidden, `would be named "node-1"`, "use hostnamePrefix")}},
		{"fragment with a literal hostname", bootstrapv1.KairosConfigSpec{CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "h", Content: "hostname: node-1\n"}}},
			[]wantErr{e("spec.template.spec.cloudConfigFragments[0].content", field.ErrorTypeForbidden, `literal hostname "node-1"`)}},
		{"fragment with a templated hostname", bootstrapv1.KairosConfigSpec{CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "h", Content: "hostname: node-{{ trunc 4 .MachineID }}\n"}}}, nil},
		{"hostname prefix", bootstrapv1.KairosConfigSpec{HostnamePrefix: "node-", ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromDistribution}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, validation.ValidateSharedKairosConfigSpec(&tc.spec, field.NewPath("spec", "template", "spec")), tc.want)
		})
	}
}
