package render

import (
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/merge"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// FuzzDocument renders nodes whose user-supplied parts are arbitrary: Document must never panic,
// and a document it accepts is YAML that starts with the #cloud-config header and writes the
// bootstrap sentinel. Seeds are the values of the golden cases.
func FuzzDocument(f *testing.F) {
	f.Add("demo-cp-{{ trunc 8 .MachineID }}", "/etc/motd", "hello {{ .Values.x }}\n", "echo pre", "--debug", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n", "spec:\n  network:\n    provider: calico\n", "#cloud-config\nstages:\n  boot:\n  - commands: [echo hi]\n", uint8(0))
	f.Add("", "/etc/x", "", "", "--node-label=a=b", "", "", "", uint8(3))
	f.Add("h", "relative/path", "\x00\xff", "$(rm -rf /)", "--token-file=/x", "{", "]", "users: x", uint8(1))
	p := fixturePKI(f)
	k0sWorker, k3s := k0sToken(f, p, token.K0sWorkerToken), k3sToken(f, p)
	f.Fuzz(func(t *testing.T, hostname, path, content, command, arg, manifest, config, fragment string, shape uint8) {
		dist, role := K0s, RoleWorker
		if shape&1 != 0 {
			dist = K3s
		}
		n := node(dist, role)
		if shape&2 != 0 {
			n.Role, n.Init, n.PKI = RoleControlPlane, true, p
			n.Manifests = []Manifest{{Name: "user", Content: manifest}}
			if dist == K3s {
				n.JoinToken = k3s
			}
		} else {
			n.JoinToken = k0sWorker
			if dist == K3s {
				n.JoinToken = k3s
			}
		}
		n.Hostname = hostname
		n.Files = []File{{Path: path, Content: content, Permissions: 0o644}}
		n.PreCommands = []string{command}
		n.Args = []string{arg}
		n.Config = config
		out, err := Document(n, merge.Fragment{Name: "fuzz", Content: []byte(fragment)})
		if err != nil {
			return
		}
		var doc map[string]any
		if err := yaml.Unmarshal(out, &doc); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, out)
		}
		if len(out) < len(merge.Header) || string(out[:len(merge.Header)]) != merge.Header {
			t.Fatalf("rendered document does not start with %s", merge.Header)
		}
	})
}
