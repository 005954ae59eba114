package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

const goldenDir = "testdata/golden"

// TestGolden pins the exact bytes of every role x distribution (plus
// fragments and template escaping). Regenerate with: go test ./render -update
func TestGolden(t *testing.T) {
	p := fixturePKI(t)
	seen := map[string]bool{}
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Document(tc.node(t, p), tc.fragments...)
			if err != nil {
				t.Fatal(err)
			}
			// Byte-stable across runs.
			again, err := Document(tc.node(t, p), tc.fragments...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, again) {
				t.Fatal("rendering is not deterministic")
			}
			path := filepath.Join(goldenDir, tc.name+".yaml")
			seen[tc.name+".yaml"] = true
			if *update {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./render -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the rendered document (run go test ./render -update and review the diff)\n%s", path, firstDiff(want, got))
			}
		})
	}
	// No stale goldens: another module loads every file in the directory.
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !seen[e.Name()] {
			if *update {
				_ = os.Remove(filepath.Join(goldenDir, e.Name()))
				continue
			}
			t.Errorf("%s has no golden case: delete it or run -update", e.Name())
		}
	}
}

func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, w, g)
		}
	}
	return ""
}

// yipStep mirrors the parts of yip v1.25.1's schema.Stage the documents use;
// like yip, permissions are numbers, so a quoted mode fails to decode.
type yipStep struct {
	Name        string   `yaml:"name"`
	If          string   `yaml:"if"`
	Commands    []string `yaml:"commands"`
	Directories []struct {
		Path        string `yaml:"path"`
		Permissions uint32 `yaml:"permissions"`
		Owner       int    `yaml:"owner"`
		Group       int    `yaml:"group"`
	} `yaml:"directories"`
	Files []struct {
		Path        string `yaml:"path"`
		Permissions uint32 `yaml:"permissions"`
		Owner       int    `yaml:"owner"`
		Group       int    `yaml:"group"`
		Content     string `yaml:"content"`
		Encoding    string `yaml:"encoding"`
		OwnerString string `yaml:"ownerstring"`
	} `yaml:"files"`
}

// TestGoldensAreValidKairosDocuments checks what the yip/kairos-sdk suite in
// the test module checks, without their module graph: header first, at least
// one user with list groups, stages that decode strictly with numeric modes,
// exactly one enabled distribution block, no role-negotiation keys.
func TestGoldensAreValidKairosDocuments(t *testing.T) {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 10 {
		t.Fatalf("only %d goldens", len(entries))
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(data, []byte("#cloud-config\n")) {
				t.Fatal("#cloud-config is not the first line")
			}
			var top map[string]yaml.Node
			if err := yaml.Unmarshal(data, &top); err != nil {
				t.Fatal(err)
			}
			for _, forbidden := range []string{"p2p", "kubevip", "cluster"} {
				if _, ok := top[forbidden]; ok {
					t.Errorf("key %s present", forbidden)
				}
			}
			var doc struct {
				Users []struct {
					Name   string   `yaml:"name"`
					Groups []string `yaml:"groups"`
				} `yaml:"users"`
			}
			if err := yaml.Unmarshal(data, &doc); err != nil {
				t.Fatalf("users: %v", err)
			}
			if len(doc.Users) == 0 || doc.Users[0].Name == "" {
				t.Fatal("no user")
			}
			stages := top["stages"]
			raw, err := yaml.Marshal(&stages)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			dec.KnownFields(true)
			var steps map[string][]yipStep
			if err := dec.Decode(&steps); err != nil {
				t.Fatalf("yip would drop every stage: %v", err)
			}
			if len(steps["boot"]) == 0 || len(steps["network"]) == 0 {
				t.Fatal("boot or network stage missing")
			}
			enabled := 0
			for _, key := range []string{"k0s", "k0s-worker", "k3s", "k3s-agent"} {
				n, ok := top[key]
				if !ok {
					continue
				}
				var block struct {
					Enabled          *bool             `yaml:"enabled"`
					Args             []string          `yaml:"args"`
					Env              map[string]string `yaml:"env"`
					ReplaceArgs      bool              `yaml:"replace_args"`
					ReplaceEnv       bool              `yaml:"replace_env"`
					EmbeddedRegistry bool              `yaml:"embedded_registry"`
				}
				raw, _ := yaml.Marshal(&n)
				dec := yaml.NewDecoder(bytes.NewReader(raw))
				dec.KnownFields(true)
				if err := dec.Decode(&block); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if block.Enabled != nil && *block.Enabled {
					enabled++
				}
			}
			if enabled != 1 {
				t.Fatalf("%d enabled distribution blocks", enabled)
			}
		})
	}
}
