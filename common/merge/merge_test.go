package merge

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const base = `#cloud-config
hostname: node-1
users:
  - name: kairos
stages:
  boot:
    - name: generated files
      files:
        - path: /etc/k0s/k0s.yaml
          permissions: 384 # 0600
          content: x
  network:
    - name: generated network
write_files:
  - path: /etc/generated
    content: g
k0s:
  enabled: true
  args:
    - --enable-worker
`

func frag(name string, pos Position, content string) Fragment {
	return Fragment{Name: name, Position: pos, Content: []byte(content)}
}

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return m
}

// walk walks a decoded document: keys for maps, ints for lists.
func walk(t *testing.T, m any, keys ...any) any {
	t.Helper()
	for _, k := range keys {
		switch kk := k.(type) {
		case string:
			m = m.(map[string]any)[kk]
		case int:
			m = m.([]any)[kk]
		}
	}
	return m
}

func names(t *testing.T, list any, key string) []string {
	t.Helper()
	var out []string
	for _, item := range list.([]any) {
		out = append(out, item.(map[string]any)[key].(string))
	}
	return out
}

func TestMergeRules(t *testing.T) {
	cases := []struct {
		name  string
		frags []Fragment
		check func(t *testing.T, doc map[string]any, raw string)
	}{
		{
			name:  "append is the default and lists concatenate after the base",
			frags: []Fragment{frag("a", "", "users:\n  - name: extra\n")},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if got := names(t, doc["users"], "name"); !reflect.DeepEqual(got, []string{"kairos", "extra"}) {
					t.Fatalf("users %v", got)
				}
			},
		},
		{
			name:  "prepend puts list items before the base",
			frags: []Fragment{frag("p", Prepend, "users:\n  - name: first\n")},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if got := names(t, doc["users"], "name"); !reflect.DeepEqual(got, []string{"first", "kairos"}) {
					t.Fatalf("users %v", got)
				}
			},
		},
		{
			name: "several prepends and appends keep their order around the base",
			frags: []Fragment{
				frag("a1", Append, "users:\n  - name: a1\n"),
				frag("p1", Prepend, "users:\n  - name: p1\n"),
				frag("a2", Append, "users:\n  - name: a2\n"),
				frag("p2", Prepend, "users:\n  - name: p2\n  - name: p2b\n"),
			},
			check: func(t *testing.T, doc map[string]any, _ string) {
				want := []string{"p1", "p2", "p2b", "kairos", "a1", "a2"}
				if got := names(t, doc["users"], "name"); !reflect.DeepEqual(got, want) {
					t.Fatalf("users %v, want %v", got, want)
				}
			},
		},
		{
			name: "lists only fragments set keep prepends before appends",
			frags: []Fragment{
				frag("a1", Append, "stages:\n  fs:\n    - name: a1\n"),
				frag("p1", Prepend, "stages:\n  fs:\n    - name: p1\n"),
				frag("p2", Prepend, "stages:\n  fs:\n    - name: p2\n"),
				frag("a2", Append, "stages:\n  fs:\n    - name: a2\n"),
			},
			check: func(t *testing.T, doc map[string]any, _ string) {
				want := []string{"p1", "p2", "a1", "a2"}
				if got := names(t, walk(t, doc, "stages", "fs"), "name"); !reflect.DeepEqual(got, want) {
					t.Fatalf("fs %v, want %v", got, want)
				}
			},
		},
		{
			name: "nested lists introduced by a prepend fragment stay in order",
			frags: []Fragment{
				frag("p1", Prepend, "extra:\n  list:\n    - p1\n"),
				frag("p2", Prepend, "extra:\n  list:\n    - p2\n"),
				frag("a1", Append, "extra:\n  list:\n    - a1\n"),
			},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if got := walk(t, doc, "extra", "list"); !reflect.DeepEqual(got, []any{"p1", "p2", "a1"}) {
					t.Fatalf("list %v", got)
				}
			},
		},
		{
			name: "nested maps merge recursively",
			frags: []Fragment{
				frag("net", Prepend, "stages:\n  boot:\n    - name: bond\n  initramfs:\n    - name: early\n"),
				frag("args", Append, "k0s:\n  args:\n    - --debug\n  env:\n    A: b\n"),
			},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if got := names(t, walk(t, doc, "stages", "boot"), "name"); !reflect.DeepEqual(got, []string{"bond", "generated files"}) {
					t.Fatalf("boot %v", got)
				}
				if got := names(t, walk(t, doc, "stages", "initramfs"), "name"); !reflect.DeepEqual(got, []string{"early"}) {
					t.Fatalf("initramfs %v", got)
				}
				if got := walk(t, doc, "k0s", "args"); !reflect.DeepEqual(got, []any{"--enable-worker", "--debug"}) {
					t.Fatalf("args %v", got)
				}
				if got := walk(t, doc, "k0s", "env", "A"); got != "b" {
					t.Fatalf("env %v", got)
				}
				if got := walk(t, doc, "k0s", "enabled"); got != true {
					t.Fatalf("enabled %v", got)
				}
			},
		},
		{
			name: "key order: base first, then new keys in fragment order",
			frags: []Fragment{
				frag("a", Append, "zeta: 1\nstages:\n  zz:\n    - name: z\n  aa:\n    - name: a\n"),
				frag("b", Prepend, "alpha: 2\n"),
			},
			check: func(t *testing.T, _ map[string]any, raw string) {
				var top []string
				for _, line := range strings.Split(raw, "\n") {
					if line != "" && line[0] != ' ' && line[0] != '-' && line[0] != '#' {
						top = append(top, strings.SplitN(line, ":", 2)[0])
					}
				}
				want := []string{"hostname", "users", "stages", "write_files", "k0s", "zeta", "alpha"}
				if !reflect.DeepEqual(top, want) {
					t.Fatalf("top-level order %v, want %v", top, want)
				}
				if !strings.Contains(raw, "  network:\n    - name: generated network\n  zz:\n") || strings.Index(raw, "  zz:") > strings.Index(raw, "  aa:") {
					t.Fatalf("nested order wrong:\n%s", raw)
				}
			},
		},
		{
			name:  "header stays first and appears once; fragment comments survive",
			frags: []Fragment{frag("c", Append, "#cloud-config\n# site settings\nsite: 1\n")},
			check: func(t *testing.T, _ map[string]any, raw string) {
				if !strings.HasPrefix(raw, "#cloud-config\nhostname: node-1\n") {
					t.Fatalf("header not first:\n%s", raw)
				}
				if strings.Count(raw, "#cloud-config") != 1 {
					t.Fatalf("header repeated:\n%s", raw)
				}
				if !strings.Contains(raw, "# site settings\nsite: 1\n") {
					t.Fatalf("comment lost:\n%s", raw)
				}
				if !strings.Contains(raw, "permissions: 384 # 0600") {
					t.Fatalf("base comment lost:\n%s", raw)
				}
			},
		},
		{
			name:  "empty fragments change nothing",
			frags: []Fragment{frag("empty", Append, ""), frag("comments", Prepend, "#cloud-config\n# nothing\n"), frag("null", Append, "~\n")},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if !reflect.DeepEqual(doc, decodeString(base)) {
					t.Fatalf("document changed: %v", doc)
				}
			},
		},
		{
			name:  "aliases and merge keys are expanded",
			frags: []Fragment{frag("anchors", Append, "defaults: &d\n  shell: /bin/bash\n  groups: [a]\nadmins:\n  - <<: *d\n    name: x\n  - *d\n")},
			check: func(t *testing.T, doc map[string]any, raw string) {
				if strings.Contains(raw, "&") || strings.Contains(raw, "*d") || strings.Contains(raw, "<<") {
					t.Fatalf("anchors left in output:\n%s", raw)
				}
				if got := walk(t, doc, "admins", 0); !reflect.DeepEqual(got, map[string]any{"shell": "/bin/bash", "groups": []any{"a"}, "name": "x"}) {
					t.Fatalf("merged map %v", got)
				}
				if got := walk(t, doc, "admins", 1, "shell"); got != "/bin/bash" {
					t.Fatalf("alias %v", got)
				}
			},
		},
		{
			name:  "templates in fragments are kept as they are",
			frags: []Fragment{frag("t", Append, "write_files:\n  - path: /etc/t\n    content: \"{{ .MachineID }}\"\n")},
			check: func(t *testing.T, doc map[string]any, _ string) {
				if got := walk(t, doc, "write_files", 1, "content"); got != "{{ .MachineID }}" {
					t.Fatalf("content %v", got)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Merge([]byte(base), "generated", tc.frags...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(out), Header+"\n") {
				t.Fatalf("no header:\n%s", out)
			}
			tc.check(t, decode(t, out), string(out))
			// Deterministic.
			again, err := Merge([]byte(base), "generated", tc.frags...)
			if err != nil || string(again) != string(out) {
				t.Fatal("merge is not deterministic")
			}
		})
	}
}

func decodeString(s string) map[string]any {
	var m map[string]any
	_ = yaml.Unmarshal([]byte(s), &m)
	return m
}

func TestMergeConflicts(t *testing.T) {
	cases := []struct {
		name  string
		frags []Fragment
		want  string
		check func(t *testing.T, ce *ConflictError)
	}{
		{
			name:  "scalar set by the base and a fragment",
			frags: []Fragment{frag("net", Append, "hostname: other\n")},
			want:  `key "hostname" is set by both "generated" and fragment "net"`,
			check: func(t *testing.T, ce *ConflictError) {
				if ce.Key != "hostname" || ce.First != (Source{Name: "generated"}) || ce.Second != (Source{Name: "net", Fragment: true}) {
					t.Fatalf("%+v", ce)
				}
			},
		},
		{
			name:  "equal values conflict too",
			frags: []Fragment{frag("same", Append, "hostname: node-1\n")},
			want:  `key "hostname" is set by both "generated" and fragment "same"`,
		},
		{
			name:  "nested scalar",
			frags: []Fragment{frag("k", Prepend, "k0s:\n  enabled: false\n")},
			want:  `key "k0s.enabled" is set by both "generated" and fragment "k"`,
		},
		{
			name:  "scalar set by two fragments",
			frags: []Fragment{frag("a", Append, "site:\n  name: x\n"), frag("b", Prepend, "site:\n  name: y\n")},
			want:  `key "site.name" is set by both fragment "a" and fragment "b"`,
		},
		{
			name:  "null counts as a value",
			frags: []Fragment{frag("n", Append, "hostname:\n")},
			want:  `key "hostname" is set by both "generated" and fragment "n"`,
		},
		{
			name:  "type mismatch: list in the base, map in a fragment",
			frags: []Fragment{frag("m", Append, "stages:\n  boot:\n    name: x\n")},
			want:  `key "stages.boot" is set by both "generated" (list) and fragment "m" (map)`,
			check: func(t *testing.T, ce *ConflictError) {
				if ce.FirstKind != "list" || ce.SecondKind != "map" {
					t.Fatalf("%+v", ce)
				}
			},
		},
		{
			name:  "type mismatch: map in the base, scalar in a fragment",
			frags: []Fragment{frag("s", Append, "k0s: true\n")},
			want:  `key "k0s" is set by both "generated" (map) and fragment "s" (scalar)`,
		},
		{
			name:  "type mismatch: list in the base, scalar in a fragment",
			frags: []Fragment{frag("s", Append, "users: kairos\n")},
			want:  `key "users" is set by both "generated" (list) and fragment "s" (scalar)`,
		},
		{
			name:  "type mismatch between two fragments",
			frags: []Fragment{frag("a", Append, "extra:\n  - x\n"), frag("b", Append, "extra:\n  k: v\n")},
			want:  `key "extra" is set by both fragment "a" (list) and fragment "b" (map)`,
		},
		{
			name:  "write_files path written twice",
			frags: []Fragment{frag("w", Append, "write_files:\n  - path: /etc/generated\n    content: mine\n")},
			want:  `file "/etc/generated" is written by both "generated" and fragment "w"`,
			check: func(t *testing.T, ce *ConflictError) {
				if ce.File != "/etc/generated" || ce.Key != "" {
					t.Fatalf("%+v", ce)
				}
			},
		},
		{
			name:  "stage file path written twice",
			frags: []Fragment{frag("s", Prepend, "stages:\n  initramfs:\n    - files:\n        - path: /etc/k0s/k0s.yaml\n          content: mine\n")},
			want:  `file "/etc/k0s/k0s.yaml" is written by both "generated" and fragment "s"`,
		},
		{
			name:  "write_files against a stage file",
			frags: []Fragment{frag("x", Append, "write_files:\n  - path: /etc/k0s/k0s.yaml\n")},
			want:  `file "/etc/k0s/k0s.yaml" is written by both "generated" and fragment "x"`,
		},
		{
			name:  "stage file against write_files, path cleaned",
			frags: []Fragment{frag("x", Append, "stages:\n  boot:\n    - files:\n        - path: /etc//generated\n")},
			want:  `file "/etc/generated" is written by both "generated" and fragment "x"`,
		},
		{
			name:  "download against a stage file",
			frags: []Fragment{frag("d", Append, "stages:\n  network:\n    - downloads:\n        - path: /etc/k0s/k0s.yaml\n          url: https://example.com/x\n")},
			want:  `file "/etc/k0s/k0s.yaml" is written by both "generated" and fragment "d"`,
		},
		{
			name: "file written by two fragments",
			frags: []Fragment{
				frag("a", Append, "write_files:\n  - path: /etc/site\n"),
				frag("b", Prepend, "stages:\n  boot:\n    - files:\n        - path: /etc/site\n"),
			},
			want: `file "/etc/site" is written by both fragment "a" and fragment "b"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge([]byte(base), "generated", tc.frags...)
			if err == nil {
				t.Fatal("expected an error")
			}
			if err.Error() != tc.want {
				t.Fatalf("got  %s\nwant %s", err, tc.want)
			}
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("not a *ConflictError: %T", err)
			}
			if tc.check != nil {
				tc.check(t, ce)
			}
		})
	}
}

func TestMergeInvalidFragments(t *testing.T) {
	cases := []struct {
		name string
		frag Fragment
		want string
	}{
		{"list", frag("l", Append, "- a\n- b\n"), `fragment "l" is not a YAML map (it is a list)`},
		{"scalar", frag("s", Append, "just text\n"), `fragment "s" is not a YAML map (it is a scalar)`},
		{"invalid YAML", frag("bad", Append, "a: [\n"), `fragment "bad" is not valid YAML`},
		{"two documents", frag("two", Append, "a: 1\n---\nb: 2\n"), `fragment "two" holds more than one YAML document`},
		{"repeated key", frag("dup", Append, "a: 1\nb:\n  c: 1\n  c: 2\n"), `fragment "dup" sets key "b.c" twice`},
		{"unknown position", frag("pos", "middle", "a: 1\n"), `fragment "pos": unknown position "middle"`},
		{"unnamed", Fragment{Content: []byte("- x\n")}, `fragment "#1" is not a YAML map`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge([]byte(base), "generated", tc.frag)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Merge([]byte("- not a map\n"), "generated"); err == nil || !strings.Contains(err.Error(), `"generated" is not a YAML map`) {
		t.Fatalf("base: got %v", err)
	}
}

func TestMergeWithoutFragmentsNormalises(t *testing.T) {
	out, err := Merge([]byte("a: 1\n"), "generated")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "#cloud-config\na: 1\n" {
		t.Fatalf("got %q", out)
	}
	out, err = Merge(nil, "generated")
	if err != nil || string(out) != "#cloud-config\n{}\n" {
		t.Fatalf("got %q %v", out, err)
	}
}

func TestMergeValues(t *testing.T) {
	dst := map[string]any{
		"apiVersion": "v1",
		"spec": map[string]any{
			"api":  map[string]any{"port": 6443, "sans": []any{"a"}},
			"list": []any{"x"},
		},
	}
	src := map[string]any{
		"spec": map[string]any{
			"api":     map[string]any{"sans": []any{"b"}, "extra": true},
			"network": map[string]any{"provider": "calico"},
		},
	}
	if err := MergeValues(dst, "generated", src, "Config"); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "v1",
		"spec": map[string]any{
			"api":     map[string]any{"port": 6443, "sans": []any{"a", "b"}, "extra": true},
			"list":    []any{"x"},
			"network": map[string]any{"provider": "calico"},
		},
	}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %#v", dst)
	}
	// src is copied, not shared.
	src["spec"].(map[string]any)["network"].(map[string]any)["provider"] = "changed"
	if dst["spec"].(map[string]any)["network"].(map[string]any)["provider"] != "calico" {
		t.Fatal("dst shares maps with src")
	}

	for _, tc := range []struct {
		src  map[string]any
		want string
	}{
		{map[string]any{"apiVersion": "v2"}, `key "apiVersion" is set by both "generated" and "Config"`},
		{map[string]any{"spec": map[string]any{"api": map[string]any{"port": 443}}}, `key "spec.api.port" is set by both "generated" and "Config"`},
		{map[string]any{"spec": map[string]any{"api": []any{"x"}}}, `key "spec.api" is set by both "generated" (map) and "Config" (list)`},
		{map[string]any{"spec": map[string]any{"list": "x"}}, `key "spec.list" is set by both "generated" (list) and "Config" (scalar)`},
	} {
		err := MergeValues(dst, "generated", tc.src, "Config")
		var ce *ConflictError
		if err == nil || err.Error() != tc.want || !errors.As(err, &ce) {
			t.Errorf("got %v, want %s", err, tc.want)
		}
	}
}

func TestMergeAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := Merge([]byte(base), "generated", frag("bomb", Append, b.String()))
	if err == nil || !strings.Contains(err.Error(), `fragment "bomb" is too large once its YAML aliases are expanded`) {
		t.Fatalf("got %v", err)
	}
}
