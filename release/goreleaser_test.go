package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

// goreleaser returns the pinned goreleaser: $GORELEASER when set (CI can build it once with
// hack/goreleaser.sh ahead of the tests), otherwise hack/goreleaser.sh builds it (cached per
// version, minutes when cold). Any failure fails the test: nothing is skipped.
func goreleaser(t *testing.T, root string) string {
	t.Helper()
	if bin := os.Getenv("GORELEASER"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("GORELEASER=%s: %v", bin, err)
		}
		return bin
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "hack", "goreleaser.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/goreleaser.sh: %v\n%s", err, stderr.String())
	}
	t.Logf("goreleaser ready after %s", time.Since(start).Round(time.Second))
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// The caller's KAIROS_PROVIDER must not leak in: unset means "both providers".
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAIROS_PROVIDER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, kv := range env {
		if !strings.HasSuffix(kv, "=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s %s: %s", strings.Join(env, " "), filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Second))
	return string(out)
}

// configWithDist writes a copy of .goreleaser.yaml whose dist folder is dist, so that the
// test never touches the shared checkout's dist/. Paths in the config are relative to the
// working directory (the repository root), not to the config file.
func configWithDist(t *testing.T, root, dist string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["dist"]; ok {
		t.Fatal(".goreleaser.yaml sets dist; the test expects the default (dist/)")
	}
	cfg["dist"] = dist
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "goreleaser.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// binaries lists the manager binaries under dist as <build dir>/<binary>.
func binaries(t *testing.T, dist string) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	matches, err := filepath.Glob(filepath.Join(dist, "*", "kairos-*-manager"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil || info.Size() == 0 || info.Mode()&0o111 == 0 {
			t.Errorf("%s is not an executable: %v", m, err)
		}
		rel, _ := filepath.Rel(dist, m)
		found[filepath.ToSlash(rel)] = true
	}
	return found
}

// TestGoreleaser checks .goreleaser.yaml with the pinned goreleaser and builds both managers
// as a snapshot for this machine's platform (--single-target; the full linux/amd64+arm64
// matrix doubles the cold build time, set KAIROS_GORELEASER_ALL_TARGETS=1 to build it), then
// once more for one provider only (KAIROS_PROVIDER), which must build nothing else.
func TestGoreleaser(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	gr := goreleaser(t, root)

	for _, provider := range []string{"", "bootstrap", "controlplane"} {
		out := run(t, root, []string{"KAIROS_PROVIDER=" + provider}, gr, "check", "--config", filepath.Join(root, ".goreleaser.yaml"))
		if !strings.Contains(out, "1 configuration file(s) validated") {
			t.Errorf("goreleaser check (KAIROS_PROVIDER=%q) did not validate the configuration:\n%s", provider, out)
		}
	}

	platform := runtime.GOARCH
	if platform == "amd64" {
		platform += "_v1"
	}
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Fatalf("the managers are built for linux/amd64 and linux/arm64 only; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	allTargets := os.Getenv("KAIROS_GORELEASER_ALL_TARGETS") == "1"

	dist := filepath.Join(t.TempDir(), "dist")
	cfg := configWithDist(t, root, dist)
	args := []string{"build", "--snapshot", "--clean", "--config", cfg}
	want := map[string]bool{
		"bootstrap_linux_" + platform + "/kairos-bootstrap-manager":       true,
		"controlplane_linux_" + platform + "/kairos-controlplane-manager": true,
	}
	if allTargets {
		want = map[string]bool{
			"bootstrap_linux_amd64_v1/kairos-bootstrap-manager":         true,
			"bootstrap_linux_arm64_v8.0/kairos-bootstrap-manager":       true,
			"controlplane_linux_amd64_v1/kairos-controlplane-manager":   true,
			"controlplane_linux_arm64_v8.0/kairos-controlplane-manager": true,
		}
	} else {
		args = append(args, "--single-target")
	}
	run(t, root, []string{"KAIROS_PROVIDER="}, gr, args...)
	got := binaries(t, dist)
	for b := range want {
		if !got[b] {
			t.Errorf("dist lacks %s (has %v)", b, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("dist has %v, want exactly %v", got, want)
	}

	// One provider per release: the other one is skipped.
	run(t, root, []string{"KAIROS_PROVIDER=bootstrap"}, gr, "build", "--snapshot", "--clean", "--single-target", "--config", cfg)
	got = binaries(t, dist)
	if len(got) != 1 || !got["bootstrap_linux_"+platform+"/kairos-bootstrap-manager"] {
		t.Errorf("KAIROS_PROVIDER=bootstrap built %v, want the bootstrap manager only", got)
	}
}
