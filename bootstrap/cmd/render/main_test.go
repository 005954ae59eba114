package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/bootstrap/internal/preview"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// runAsCommand makes the test binary behave as the render command, so that the tests below
// run the real main: flag parsing, exit codes and the exact bytes on stdout and stderr.
const runAsCommand = "KAIROS_CAPI_RENDER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsCommand) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type result struct {
	stdout, stderr []byte
	code           int
}

// command runs the render command with args and stdin.
func command(t *testing.T, stdin []byte, args ...string) result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runAsCommand+"=1")
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	res := result{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	switch {
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("running the command: %v", err)
	}
	return res
}

// clusterPKI returns the certificate Secrets of Cluster "demo" and its k3s token, generated
// once: with them in the input, the rendered data is reproducible.
var clusterPKI = sync.OnceValues(func() (string, error) {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	var docs []string
	var caCert []byte
	for _, suffix := range []string{"ca", "etcd", "proxy", "sa"} {
		var kp *pki.KeyPair
		var err error
		if suffix == "sa" {
			kp, err = pki.NewServiceAccountKeyPair()
		} else {
			kp, err = pki.NewCA(suffix, time.Hour)
		}
		if err != nil {
			return "", err
		}
		if suffix == "ca" {
			caCert = kp.Cert
		}
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: demo-%s\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
			suffix, b64(kp.Cert), b64(kp.Key)))
	}
	tok, err := token.NewK3sToken(caCert)
	if err != nil {
		return "", err
	}
	agent, err := token.NewK3sAgentToken(caCert)
	if err != nil {
		return "", err
	}
	docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: demo-k3s-token\nstringData:\n  value: %q\n  agent-token: %q\n", tok, agent))
	return strings.Join(docs, "---\n"), nil
})

func input(t *testing.T, spec string) []byte {
	t.Helper()
	secrets, err := clusterPKI()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KairosConfig
metadata:
  name: node-0
spec:
` + spec + `---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: demo
spec:
  controlPlaneEndpoint:
    host: api.demo.example.com
    port: 6443
---
` + secrets)
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// library renders the same input through the preview package the command wraps.
func library(t *testing.T, in []byte, opts preview.Options) (*preview.Result, error) {
	t.Helper()
	return preview.Render(context.Background(), bufio.NewReader(bytes.NewReader(in)), opts)
}

const (
	controlPlaneK0s = "  role: control-plane\n  distribution: k0s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n"
	workerK3s       = "  role: worker\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n  userPassword: s3cret\n"
)

func TestStdoutIsExactlyTheSecretValue(t *testing.T) {
	for name, spec := range map[string]string{"k0s control plane": controlPlaneK0s, "k3s worker": workerK3s} {
		t.Run(name, func(t *testing.T) {
			in := input(t, spec)
			want, err := library(t, in, preview.Options{})
			if err != nil {
				t.Fatal(err)
			}
			file := writeFile(t, in)
			for _, tc := range []struct {
				name  string
				stdin []byte
				args  []string
			}{
				{"file", nil, []string{"-f", file}},
				{"stdin", in, []string{"-f", "-"}},
			} {
				if name != "k0s control plane" && tc.name == "file" {
					continue // each child pays for admission's placeholder keys: keep the matrix small
				}
				t.Run(tc.name, func(t *testing.T) {
					res := command(t, tc.stdin, tc.args...)
					if res.code != 0 {
						t.Fatalf("exit code %d, stderr:\n%s", res.code, res.stderr)
					}
					if !bytes.Equal(res.stdout, want.Data) {
						t.Fatalf("stdout is not the Secret value:\n--- stdout\n%s\n--- want\n%s", res.stdout, want.Data)
					}
					if bytes.Contains(res.stderr, []byte("Warning")) {
						t.Errorf("unexpected warnings:\n%s", res.stderr)
					}
				})
			}
		})
	}
}

func TestWarningsGoToStderr(t *testing.T) {
	in := input(t, "  role: worker\n  distribution: k3s\n  kubernetesVersion: v1.31.2\n")
	want, err := library(t, in, preview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := command(t, in, "-f", "-")
	if res.code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", res.code, res.stderr)
	}
	if !bytes.Equal(res.stdout, want.Data) {
		t.Fatal("warnings changed stdout")
	}
	if len(want.Warnings) != 1 || !strings.Contains(string(res.stderr), "Warning: "+want.Warnings[0]+"\n") {
		t.Fatalf("stderr does not carry the warning %q:\n%s", want.Warnings, res.stderr)
	}
}

func TestKubernetesVersionFlag(t *testing.T) {
	in := input(t, "  role: worker\n  distribution: k3s\n  userPassword: s3cret\n")
	res := command(t, in, "-f", "-", "-kubernetes-version", "v1.30.4")
	if res.code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", res.code, res.stderr)
	}
	if !bytes.Contains(res.stdout, []byte("want=v1.30.4")) {
		t.Fatalf("the flag's version is not rendered:\n%s", res.stdout)
	}

	res = command(t, in, "-f", "-")
	if res.code != 1 || len(res.stdout) != 0 || !bytes.Contains(res.stderr, []byte("-kubernetes-version")) {
		t.Fatalf("without a version: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

func TestInvalidObject(t *testing.T) {
	in := input(t, workerK3s+"  singleNode: true\n")
	_, libErr := library(t, in, preview.Options{})
	if libErr == nil {
		t.Fatal("the library renders an invalid object")
	}
	res := command(t, in, "-f", writeFile(t, in))
	if res.code == 0 {
		t.Fatal("exit code 0 for an invalid object")
	}
	if len(res.stdout) != 0 {
		t.Fatalf("stdout is not empty:\n%s", res.stdout)
	}
	if !strings.Contains(string(res.stderr), libErr.Error()+"\n") {
		t.Fatalf("stderr does not carry the webhook error %q:\n%s", libErr, res.stderr)
	}
	for _, s := range []string{"spec.singleNode", "is invalid", "set role: control-plane"} {
		if !bytes.Contains(res.stderr, []byte(s)) {
			t.Errorf("stderr does not contain %q", s)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdin    string
		code     int
		inStderr string
	}{
		{"no arguments", nil, "", 2, "usage: render -f FILE"},
		{"empty file name", []string{"-f", ""}, "", 2, "usage:"},
		{"unknown flag", []string{"-x"}, "", 2, "flag provided but not defined: -x"},
		{"missing file", []string{"-f", filepath.Join(t.TempDir(), "absent.yaml")}, "", 1, "no such file or directory"},
		{"empty input", []string{"-f", "-"}, "", 1, "the input holds no KairosConfig"},
		{"unsupported kind", []string{"-f", "-"}, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", 1, "ConfigMap is not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := command(t, []byte(tc.stdin), tc.args...)
			if res.code != tc.code {
				t.Errorf("exit code %d, want %d", res.code, tc.code)
			}
			if len(res.stdout) != 0 {
				t.Errorf("stdout is not empty: %q", res.stdout)
			}
			if !strings.Contains(string(res.stderr), tc.inStderr) {
				t.Errorf("stderr does not contain %q:\n%s", tc.inStderr, res.stderr)
			}
		})
	}
}
