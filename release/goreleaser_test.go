package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
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

// testConfig writes a copy of .goreleaser.yaml whose dist folder is dist, so that the test
// never touches the shared checkout's dist/, and, unless allTargets, whose builds are for
// this machine's architecture only: a cold build for another architecture costs minutes per
// manager, and what the test checks (the pipeline, the artifacts, the versions built) does
// not depend on the architecture. Paths in the config are relative to the working directory
// (the repository root), not to the config file.
func testConfig(t *testing.T, root, dist string, allTargets bool) string {
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
	if !allTargets {
		builds, _ := cfg["builds"].([]any)
		if len(builds) != 2 {
			t.Fatalf(".goreleaser.yaml has %d builds, want the two managers", len(builds))
		}
		for _, b := range builds {
			b.(map[string]any)["goarch"] = []any{runtime.GOARCH}
		}
	}
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

func repositoryRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// hostPlatform is the folder suffix goreleaser gives this machine's target.
func hostPlatform(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Fatalf("the managers are built for linux/amd64 and linux/arm64 only; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if runtime.GOARCH == "amd64" {
		return "amd64_v1"
	}
	return "arm64_v8.0"
}

// TestGoreleaser checks .goreleaser.yaml with the pinned goreleaser and builds both managers
// as a snapshot for this machine's platform (the full linux/amd64+arm64 matrix doubles the
// cold build time, set KAIROS_GORELEASER_ALL_TARGETS=1 to build it), then once more for one
// provider only (KAIROS_PROVIDER), which must build nothing else.
func TestGoreleaser(t *testing.T) {
	root := repositoryRoot(t)
	gr := goreleaser(t, root)

	for _, provider := range []string{"", "bootstrap", "controlplane"} {
		out := run(t, root, []string{"KAIROS_PROVIDER=" + provider}, gr, "check", "--config", filepath.Join(root, ".goreleaser.yaml"))
		if !strings.Contains(out, "1 configuration file(s) validated") {
			t.Errorf("goreleaser check (KAIROS_PROVIDER=%q) did not validate the configuration:\n%s", provider, out)
		}
	}

	platform := hostPlatform(t)
	allTargets := os.Getenv("KAIROS_GORELEASER_ALL_TARGETS") == "1"

	dist := filepath.Join(t.TempDir(), "dist")
	cfg := testConfig(t, root, dist, allTargets)
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

// TestGoreleaserSnapshotRelease runs the release pipeline of each provider the way the
// release procedure does (KAIROS_PROVIDER selects the provider), as a snapshot that publishes
// nothing: goreleaser release --snapshot --clean --skip=publish --skip=ko. It checks the
// artifacts (only that provider's manager, its archive and checksum) and that the manager was
// built with the dependency versions its own go.mod pins, the GOWORK=off build list, which is
// what a consumer of the provider's tag gets.
//
// Why --skip=ko: in a snapshot, goreleaser v2.15.1's ko pipe does not skip itself; it builds
// the images and publishes them to the local Docker daemon instead of the registry
// (internal/pipe/ko/ko.go: Run calls Publish when ctx.Snapshot, which then uses
// publish.NewDaemon), after fetching the base image gcr.io/distroless/static:nonroot. There is
// neither a daemon nor a reachable gcr.io here; without the skip the run fails with
// "build: fetching base image: Get https://gcr.io/v2/: ... no such host". Everything else of
// the pipeline runs: git state, defaults (the kos section's included), builds, archives,
// checksums and metadata. --snapshot itself skips announce, publish and validate.
func TestGoreleaserSnapshotRelease(t *testing.T) {
	root := repositoryRoot(t)
	gr := goreleaser(t, root)
	targets := []string{"linux_" + hostPlatform(t)}
	allTargets := os.Getenv("KAIROS_GORELEASER_ALL_TARGETS") == "1"
	if allTargets {
		targets = []string{"linux_amd64_v1", "linux_arm64_v8.0"}
	}

	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		t.Run(p.Name, func(t *testing.T) {
			dist := filepath.Join(t.TempDir(), "dist")
			cfg := testConfig(t, root, dist, allTargets)
			run(t, root, []string{"KAIROS_PROVIDER=" + p.Name}, gr, "release", "--snapshot", "--clean", "--skip=publish", "--skip=ko", "--config", cfg)

			binary := "kairos-" + p.Name + "-manager"
			arts := artifacts(t, dist)
			var binaries, archives, checksums []artifact
			for _, a := range arts {
				switch {
				case a.Type == "Binary" && a.Extra.Format == "":
					binaries = append(binaries, a)
				case a.Type == "Binary" && a.Extra.Format == "binary":
					archives = append(archives, a)
				case a.Type == "Checksum":
					checksums = append(checksums, a)
				case a.Type == "Metadata":
				default:
					t.Errorf("unexpected artifact %+v", a)
				}
			}
			if len(binaries) != len(targets) || len(archives) != len(targets) || len(checksums) != 1 {
				t.Fatalf("want %d binaries and archives of %s and one checksum file, got %+v", len(targets), binary, arts)
			}
			sums := readChecksums(t, checksums[0].Path)
			for i, target := range targets {
				b, a := binaries[i], archives[i]
				if b.Name != binary || b.Extra.ID != p.Name || b.Target != target {
					t.Errorf("binary %+v, want %s of build %s for %s", b, binary, p.Name, target)
				}
				goarch, _, _ := strings.Cut(strings.TrimPrefix(target, "linux_"), "_")
				if want := binary + "_linux_" + goarch; a.Name != want {
					t.Errorf("archive %s, want %s", a.Name, want)
				}
				if got, want := sums[a.Name], sha256File(t, a.Path); got != want {
					t.Errorf("checksums.txt has %q for %s, want %s", got, a.Name, want)
				}
				if target == targets[0] {
					checkBuiltVersions(t, root, p.Name, b.Path)
				}
			}
			if len(sums) != len(targets) {
				t.Errorf("checksums.txt lists %v, want the %d archives", sums, len(targets))
			}
		})
	}
}

type artifact struct {
	Name, Path, Type, Target string
	Extra                    struct{ ID, Format string }
}

func artifacts(t *testing.T, dist string) []artifact {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "artifacts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var arts []artifact
	if err := json.Unmarshal(data, &arts); err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(arts, func(i, j int) bool { return arts[i].Target < arts[j].Target })
	return arts
}

func readChecksums(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("%s: line %q", path, line)
		}
		sums[name] = sum
	}
	return sums
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checkBuiltVersions compares the module versions recorded in a manager binary with the
// build list of its module with GOWORK=off: every dependency must be the version the go.mod
// pins (a workspace build would record the workspace's versions, and the sibling modules as
// (devel) without a version), and the sibling modules must come from the tree through the
// go.mod's replace directives.
func checkBuiltVersions(t *testing.T, root, folder, binary string) {
	t.Helper()
	goCmd := func(dir string, env []string, args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	pinned := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(goCmd(filepath.Join(root, folder), []string{"GOWORK=off"}, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")), "\n") {
		path, version, _ := strings.Cut(line, " ")
		pinned[path] = version
	}
	deps, replaced := 0, 0
	var last string
	for _, line := range strings.Split(goCmd(root, nil, "version", "-m", binary), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "dep":
			deps++
			last = f[1]
			if want, ok := pinned[f[1]]; !ok || f[2] != want {
				t.Errorf("%s: built with %s %s, %s/go.mod pins %q", filepath.Base(binary), f[1], f[2], folder, want)
			}
		case len(f) >= 2 && f[0] == "=>":
			if !strings.HasPrefix(last, "github.com/kairos-capi/kairos-capi/") || !strings.HasPrefix(f[1], ".") {
				t.Errorf("%s: %s replaced by %s; only the sibling modules are replaced, by their folders", filepath.Base(binary), last, f[1])
			}
			replaced++
		}
	}
	if deps < 20 || replaced < 2 {
		t.Errorf("%s: %d dependencies, %d replaced by sibling folders: not the build info of a manager", filepath.Base(binary), deps, replaced)
	}
}
