package yamlenc_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/internal/yamlenc"
)

// document is one rendered golden: its model, and the k0s ClusterConfig it writes (if any)
// as the generic map the renderer encodes with AnyMap.
type document struct {
	name   string
	config *cloudconfig.Config
	k0s    map[string]any
}

// goldens loads the renderer's golden documents that Config.Marshal writes byte for byte
// (the fragment golden is yaml.v3's output of the merge, not Marshal's).
func goldens(tb testing.TB) []document {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "render", "testdata", "golden", "*.yaml"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no goldens: %v", err)
	}
	var docs []document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		cfg, err := cloudconfig.UnmarshalStrict(data)
		if err != nil {
			continue // the merged fragment document has keys the model does not know
		}
		if out, err := cfg.Marshal(); err != nil || !bytes.Equal(out, data) {
			continue
		}
		d := document{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), config: cfg}
		for _, steps := range cfg.Stages {
			for _, st := range steps {
				for _, file := range st.Files {
					if file.Path == "/etc/k0s/k0s.yaml" {
						if err := yaml.Unmarshal([]byte(file.Content), &d.k0s); err != nil {
							tb.Fatal(err)
						}
					}
				}
			}
		}
		docs = append(docs, d)
	}
	if len(docs) < 10 {
		tb.Fatalf("only %d goldens round-trip through Config.Marshal", len(docs))
	}
	return docs
}

// marshalV3 is the alternative to this package: go.yaml.in/yaml/v3's encoder on the same
// typed document, which is deterministic too (struct fields in order, map keys sorted).
func marshalV3(tb testing.TB, v any, header bool) []byte {
	var b bytes.Buffer
	if header {
		b.WriteString(cloudconfig.Header + "\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		tb.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// TestEncodersAgree: both encoders write the same documents (they read back equal), so the
// benchmark compares like with like. Only this package's output is the goldens' bytes.
func TestEncodersAgree(t *testing.T) {
	for _, d := range goldens(t) {
		back, err := cloudconfig.UnmarshalStrict(marshalV3(t, d.config, true))
		if err != nil {
			t.Fatalf("%s: yaml.v3's document does not load: %v", d.name, err)
		}
		if !reflect.DeepEqual(back, d.config) {
			t.Errorf("%s: yaml.v3's document reads back differently", d.name)
		}
		if d.k0s == nil {
			continue
		}
		e := yamlenc.New(4096)
		e.AnyMap(0, d.k0s)
		var a, b map[string]any
		if err := yaml.Unmarshal(e.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(marshalV3(t, d.k0s, false), &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the k0s ClusterConfigs differ", d.name)
		}
	}
}

// BenchmarkEncode encodes every golden document both ways: this package through
// Config.Marshal (the renderer's path) and yaml.v3's encoder, and the k0s ClusterConfig of
// the k0s controllers through AnyMap and yaml.v3.
//
//	go test -run '^$' -bench Encode -benchmem ./internal/yamlenc/
func BenchmarkEncode(b *testing.B) {
	docs := goldens(b)
	b.Run("document/yamlenc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				if _, err := d.config.Marshal(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("document/yaml.v3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				marshalV3(b, d.config, true)
			}
		}
	})
	b.Run("k0s-config/yamlenc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				if d.k0s != nil {
					e := yamlenc.New(4096)
					e.AnyMap(0, d.k0s)
					if e.Err() != nil {
						b.Fatal(e.Err())
					}
				}
			}
		}
	})
	b.Run("k0s-config/yaml.v3", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				if d.k0s != nil {
					marshalV3(b, d.k0s, false)
				}
			}
		}
	})
}
