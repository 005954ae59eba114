package userdata_test

// Failing tests for product bugs found while writing the userdata tests. They are not part of
// the delivered suite; copy this file into bootstrap/internal/userdata/ to reproduce.

import (
	"bytes"
	"strings"
	"testing"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// TestSSHKeyWithTrailingNewline: admission accepts a key pasted with its trailing newline
// (a YAML block scalar or `cat key.pub`), so rendering must accept it too.
func TestSSHKeyWithTrailingNewline(t *testing.T) {
	s := baseSpec("wk-k0s")
	s.SSHPublicKey = sshKey + "\n"
	if errs := func() error { d := s.DeepCopy(); d.Default(); return d.Validate(nil).ToAggregate() }(); errs != nil {
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
			if errs := s.Validate(nil).ToAggregate(); errs != nil {
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
		accepted := d.Validate(nil).ToAggregate() == nil
		_, err := renderSpec(t, s)
		if accepted && err != nil {
			t.Errorf("validation accepts manifest %q but rendering fails: %v", name, err)
		}
		if !accepted && name == strings.ToLower(name) {
			t.Errorf("validation refuses the lower-case manifest name %q", name)
		}
	}
}

func grepLine(doc []byte, sub string) string {
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if bytes.Contains(l, []byte(sub)) {
			return string(l)
		}
	}
	return ""
}
