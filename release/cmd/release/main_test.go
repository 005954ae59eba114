package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "repo")
	if err := run([]string{"-provider", "controlplane", "-version", "v0.2.0", "-out", out}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"control-plane-components.yaml", "metadata.yaml", "cluster-template.yaml", "cluster-template-ha.yaml"} {
		if _, err := os.Stat(filepath.Join(out, "control-plane-kairos", "v0.2.0", f)); err != nil {
			t.Error(err)
		}
	}
	if err := run([]string{"-provider", "bootstrap-kairos", "-version", "v0.1.0", "-out", out}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "bootstrap-kairos", "v0.1.0", "bootstrap-components.yaml")); err != nil {
		t.Error(err)
	}
}

func TestRunRefuses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "repo")
	cases := map[string]struct {
		args []string
		want string
	}{
		"missing flags":    {[]string{"-provider", "bootstrap"}, "required"},
		"unknown provider": {[]string{"-provider", "kubeadm", "-version", "v0.1.0", "-out", out}, "unknown provider"},
		"unlisted series":  {[]string{"-provider", "bootstrap", "-version", "v0.9.0", "-out", out}, "release/metadata/bootstrap.yaml"},
		"bad version":      {[]string{"-provider", "controlplane", "-version", "latest", "-out", out}, `rule "version"`},
		"bad root":         {[]string{"-provider", "bootstrap", "-version", "v0.1.0", "-out", out, "-root", t.TempDir()}, "bootstrap.yaml"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := run(c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused release created %s", out)
			}
		})
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestModules(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"release/modules.yaml": "repository: example.com/r\nmodules:\n" +
			"  - folder: api\n    path: example.com/r/api\n    version: v0.2.0\n    published: true\n" +
			"  - folder: provider\n    path: example.com/r/provider\n    version: v0.2.0\n    published: true\n",
		"go.work":         "go 1.26.0\n\nuse (\n\t./api\n\t./provider\n)\n",
		"api/go.mod":      "module example.com/r/api\n\ngo 1.26.0\n",
		"provider/go.mod": "module example.com/r/provider\n\ngo 1.26.0\n\nrequire example.com/r/api v0.0.0-00010101000000-000000000000\n\nreplace example.com/r/api => ../api\n",
	})
	modules := func(args ...string) (string, string, error) {
		var stdout, stderr strings.Builder
		err := runModules(append(args, "-root", root), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}

	if _, _, err := modules("-check"); err == nil || !strings.Contains(err.Error(), "provider/go.mod: requires example.com/r/api v0.0.0-00010101000000-000000000000, release/modules.yaml lists v0.2.0") {
		t.Fatalf("-check: want the drift of provider/go.mod, got %v", err)
	}
	stdout, _, err := modules("-set", "api=v0.2.1", "-set", "provider/=v0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "api/v0.2.1\nprovider/v0.3.0\n" {
		t.Errorf("printed tags %q", stdout)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "provider", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "require example.com/r/api v0.2.1\n") {
		t.Errorf("provider/go.mod:\n%s", gomod)
	}
	stdout, stderr, err := modules("-check")
	if err != nil || stdout != "" || !strings.Contains(stderr, "matches") {
		t.Errorf("-check after the rewrite: %v, stdout %q, stderr %q", err, stdout, stderr)
	}

	for _, args := range [][]string{
		{"-check", "-set", "api=v0.2.2"},
		{"-set", "api"},
		{"-set", "nothere=v0.2.2"},
		{"-set", "api=v0.3"},
		{"extra"},
	} {
		if _, _, err := modules(args...); err == nil {
			t.Errorf("modules %v: want an error", args)
		}
	}
	// A refused -set writes nothing.
	if _, _, err := modules("-check"); err != nil {
		t.Errorf("refused -set changed the tree: %v", err)
	}
}

func TestPreflightRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"-provider", "bootstrap"},
		{"-version", "v0.2.0"},
		{"-provider", "kubeadm", "-version", "v0.2.0"},
		{"-provider", "bootstrap", "-version", "v0.2.0", "extra"},
	} {
		if err := runPreflight(args, io.Discard); err == nil {
			t.Errorf("preflight %v: want an error", args)
		}
	}
}
