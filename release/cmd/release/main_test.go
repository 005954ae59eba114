package main

import (
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
