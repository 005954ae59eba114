package yamlenc

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// roundTrip encodes v under key "v" and decodes it back with yaml.v3.
func roundTrip(t *testing.T, v string) string {
	t.Helper()
	e := New(64)
	e.String(0, "v", v)
	e.Key(0, "list")
	e.Newline()
	e.Item(2)
	e.StringValue(4, v)
	e.Item(2)
	e.String(4, "nested", v)
	e.EndItem()
	if err := e.Err(); err != nil {
		t.Fatalf("encoding %q: %v", v, err)
	}
	var got struct {
		V    string `yaml:"v"`
		List []any  `yaml:"list"`
	}
	if err := yaml.Unmarshal(e.Bytes(), &got); err != nil {
		t.Fatalf("decoding %q: %v\n%s", v, err, e.Bytes())
	}
	if got.V != v {
		t.Fatalf("round trip of %q gave %q\n%s", v, got.V, e.Bytes())
	}
	if len(got.List) != 2 || got.List[0] != v {
		t.Fatalf("list round trip of %q gave %#v\n%s", v, got.List, e.Bytes())
	}
	if m, ok := got.List[1].(map[string]any); !ok || m["nested"] != v {
		t.Fatalf("nested round trip of %q gave %#v\n%s", v, got.List[1], e.Bytes())
	}
	return string(e.Bytes())
}

func TestScalarRoundTrip(t *testing.T) {
	cases := []string{
		"", " ", "plain", "two words", "trailing ", " leading", "a: b", "a:b", "a #b", "a#b", "#x",
		"true", "True", "yes", "no", "on", "off", "y", "N", "null", "Null", "~", "=", "<<", "-", "--", "-1", "-x", "--flag=value",
		"1", "0644", "0o644", "1e3", ".5", "1_000", "0x1F", "1:20", "2001-12-14", ".inf", "-.inf", ".nan",
		"github:user", "https://example.com:6443/x?y=z", "node.cluster.x-k8s.io/uninitialized:NoSchedule",
		"{{ trunc 8 .MachineID }}", "x-{{ .MachineID }}", "[a]", "{a: b}", "&anchor", "*alias", "!tag", "|", ">", "%", "@", "`",
		"'single'", "\"double\"", "back\\slash", "tab\there", "cr\rhere", "bell\a", "nul\x00", "del\x7f", "\u00a0nbsp", "bom\ufeff", "line\u2028sep",
		"ünïcödé", "日本語", "emoji 🙂",
		"a\nb", "a\nb\n", "a\nb\n\n", "a\n\n", "\n", "\n\n", "\nleading newline", "\n  indented after newline",
		"  indented\nfirst", "\tTab first\n", "trailing spaces  \nline", "line\n  ", "a\r\nb", "x\n---\ny", "x\n...\ny",
		"#!/bin/sh\necho \"hi\"\n", "key: value\nlist:\n  - a\n", strings.Repeat("x", 2000),
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
	}
	for _, c := range cases {
		roundTrip(t, c)
	}
}

func TestScalarStyles(t *testing.T) {
	for v, want := range map[string]string{
		"plain":        "v: plain\n",
		"--enable":     "v: --enable\n",
		"0644":         "v: \"0644\"\n",
		"true":         "v: \"true\"\n",
		"a: b":         "v: \"a: b\"\n",
		"a\nb\n":       "v: |\n  a\n  b\n",
		"a\nb":         "v: |-\n  a\n  b\n",
		"a\n\n":        "v: |+\n  a\n\n",
		" a\nb\n":      "v: |2\n   a\n  b\n",
		"a\r\nb\n":     "v: \"a\\r\\nb\\n\"\n",
		"{{ x }}":      "v: \"{{ x }}\"\n",
		"10.0.0.1":     "v: \"10.0.0.1\"\n",
		"github:user1": "v: github:user1\n",
	} {
		e := New(16)
		e.String(0, "v", v)
		if got := string(e.Bytes()); got != want {
			t.Errorf("%q: got %q, want %q", v, got, want)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	for _, v := range []string{"\xff", "a\n\xff\n"} {
		e := New(16)
		e.String(0, "v", v)
		if e.Err() == nil {
			t.Errorf("%q: expected an error", v)
		}
	}
	e := New(16)
	e.Key(0, "")
	if e.Err() == nil {
		t.Error("empty key: expected an error")
	}
}

func TestAnyRoundTrip(t *testing.T) {
	in := map[string]any{
		"s":     "text",
		"n":     42,
		"neg":   int64(-7),
		"u":     uint32(7),
		"f":     1.5,
		"fi":    2.0,
		"inf":   math.Inf(1),
		"b":     true,
		"null":  nil,
		"empty": map[string]any{},
		"none":  []any{},
		"ts":    time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		"map":   map[string]any{"z": "last", "a": []any{"x", map[string]any{"k": "v", "l": []any{1, 2}}, []any{"nested"}}},
		"multi": "line1\nline2\n",
		"ss":    []string{"a", "b"},
		"ms":    map[string]string{"k": "v"},
	}
	e := New(64)
	e.AnyMap(0, in)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(e.Bytes(), &out); err != nil {
		t.Fatalf("%v\n%s", err, e.Bytes())
	}
	want := map[string]any{
		"s": "text", "n": 42, "neg": -7, "u": 7, "f": 1.5, "fi": 2.0, "inf": math.Inf(1), "b": true, "null": nil,
		"empty": map[string]any{}, "none": []any{}, "ts": time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		"map":   map[string]any{"z": "last", "a": []any{"x", map[string]any{"k": "v", "l": []any{1, 2}}, []any{"nested"}}},
		"multi": "line1\nline2\n", "ss": []any{"a", "b"}, "ms": map[string]any{"k": "v"},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got %#v\nwant %#v\n%s", out, want, e.Bytes())
	}
	// Sorted keys: deterministic.
	if !strings.HasPrefix(string(e.Bytes()), "b: true\n") {
		t.Errorf("keys not sorted:\n%s", e.Bytes())
	}
	e = New(8)
	e.Any(0, "x", struct{}{})
	if e.Err() == nil {
		t.Error("unsupported type: expected an error")
	}
}

func TestEmptyItem(t *testing.T) {
	e := New(16)
	e.Key(0, "l")
	e.Newline()
	e.Item(2)
	e.EndItem()
	if got := string(e.Bytes()); got != "l:\n  - {}\n" {
		t.Fatalf("got %q", got)
	}
}

func TestPrintableWord(t *testing.T) {
	for c := 0; c < 256; c++ {
		w := uint64(0x4141414141414141)&^0xff | uint64(c)
		if got, want := printableWord(w), c >= 0x20 && c < 0x7f; got != want {
			t.Errorf("byte %#x: got %v, want %v", c, got, want)
		}
	}
}

func FuzzScalarRoundTrip(f *testing.F) {
	for _, s := range []string{"a", "a: b", "x\ny\n", " x\n", "\n\n", "0644", "-x", "{{ x }}", "a\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := New(16)
		e.String(0, "v", s)
		if e.Err() != nil {
			return // invalid UTF-8 is refused, not mangled
		}
		var got struct{ V string }
		if err := yaml.Unmarshal(e.Bytes(), &got); err != nil {
			t.Fatalf("%q: %v\n%s", s, err, e.Bytes())
		}
		if got.V != s {
			t.Fatalf("%q round-tripped to %q\n%s", s, got.V, e.Bytes())
		}
	})
}
