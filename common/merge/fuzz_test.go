package merge

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzMerge: whatever the fragment, Merge either fails cleanly or returns a
// document that starts with the header and parses as a YAML map.
func FuzzMerge(f *testing.F) {
	for _, s := range []string{"a: 1\n", "users:\n  - name: x\n", "- a\n", "a: &x [1]\nb: *x\n", "<<: {a: 1}\n", "stages:\n  boot:\n    - files:\n        - path: /x\n", "hostname: h\n", ""} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, frag string, prepend bool) {
		pos := Append
		if prepend {
			pos = Prepend
		}
		out, err := Merge([]byte(base), "generated", Fragment{Name: "f", Position: pos, Content: []byte(frag)})
		if err != nil {
			return
		}
		if !bytes.HasPrefix(out, []byte(Header+"\n")) {
			t.Fatalf("no header:\n%s", out)
		}
		var m map[string]any
		if err := yaml.Unmarshal(out, &m); err != nil {
			t.Fatalf("output does not parse: %v\n%s", err, out)
		}
	})
}
