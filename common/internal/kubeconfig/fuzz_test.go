package kubeconfig

import (
	"testing"
)

// FuzzParse decodes arbitrary kubeconfigs (a k0s join token carries one): Parse and Current
// must never panic, and what they accept survives Marshal and Parse again.
func FuzzParse(f *testing.F) {
	c := New("demo", "demo", "https://10.0.0.1:6443", []byte("ca"), "kubelet-bootstrap", AuthInfo{Token: "abcdef.0123456789abcdef"})
	if data, err := c.Marshal(); err == nil {
		f.Add(data)
	}
	f.Add([]byte("apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: []\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("clusters: [{name: a, cluster: {server: 1}}]\ncontexts: [{name: a, context: {cluster: a, user: a}}]\ncurrent-context: a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		cluster, user, err := cfg.Current()
		if err != nil {
			return
		}
		if cluster == nil || user == nil {
			t.Fatalf("Current returned nil without an error for %q", data)
		}
		out, err := cfg.Marshal()
		if err != nil {
			t.Fatalf("a parsed kubeconfig does not marshal: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("a marshalled kubeconfig does not parse: %v\n%s", err, out)
		}
	})
}
