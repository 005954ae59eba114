package merge

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzMerge merges arbitrary fragments into arbitrary documents: Merge must never panic, and
// whatever it accepts is one YAML map behind the #cloud-config header, the same bytes every
// time. Seeds: the renderer's golden documents and fragments of the merge tests' shapes.
func FuzzMerge(f *testing.F) {
	goldens, _ := filepath.Glob(filepath.Join("..", "render", "testdata", "golden", "*.yaml"))
	for _, g := range goldens {
		if data, err := os.ReadFile(g); err == nil {
			f.Add(data, []byte("#cloud-config\nstages:\n  boot:\n    - name: user\n      commands: [echo hi]\n"), false)
		}
	}
	f.Add([]byte("#cloud-config\nusers:\n- name: kairos\n"), []byte("users:\n- name: ops\n  groups: [admin]\n"), true)
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: /a\n  content: x\n"), []byte("write_files:\n- path: /a\n  content: y\n"), false)
	f.Add([]byte("a: {b: [1, 2]}\n"), []byte("a: {b: [3], c: d}\n"), true)
	f.Add([]byte("a: &x [1]\nb: *x\n"), []byte("b: [2]\n"), false)
	f.Fuzz(func(t *testing.T, base, fragment []byte, prepend bool) {
		pos := Append
		if prepend {
			pos = Prepend
		}
		out, err := Merge(base, "base", Fragment{Name: "fuzz", Position: pos, Content: fragment})
		if err != nil {
			return
		}
		if !bytes.HasPrefix(out, []byte(Header+"\n")) {
			t.Fatalf("merged document does not start with %s:\n%s", Header, out)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(out, &doc); err != nil {
			t.Fatalf("merged document is not a YAML map: %v\n%s", err, out)
		}
		again, err := Merge(base, "base", Fragment{Name: "fuzz", Position: pos, Content: fragment})
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("merging twice differs (%v):\n%s\n---\n%s", err, out, again)
		}
	})
}
