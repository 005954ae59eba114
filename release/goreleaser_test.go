package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
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

// run runs a command and fails the test if it fails. env entries override the caller's
// environment; an entry "NAME=" unsets NAME. The caller's KAIROS_PROVIDER never leaks in.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runCommand(t, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// runCommand is run returning the command's error instead of failing the test.
func runCommand(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
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
	override := map[string]bool{"KAIROS_PROVIDER": true}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		override[k] = true
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !override[k] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, kv := range env {
		if !strings.HasSuffix(kv, "=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s %s: %s", strings.Join(env, " "), filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Second))
	return string(out), err
}

// testConfig writes a copy of .goreleaser.yaml whose dist folder is dist, so that the test
// never touches the shared checkout's dist/, and, unless allTargets, whose builds are for
// this machine's architecture only: a cold build for another architecture costs minutes per
// manager, and what the test checks (the pipeline, the artifacts, the versions built) does
// not depend on the architecture. Paths in the config are relative to the working directory
// (the repository root), not to the config file. Each edit then changes the parsed config.
func testConfig(t *testing.T, root, dist string, allTargets bool, edits ...func(cfg map[string]any)) string {
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
	for _, edit := range edits {
		edit(cfg)
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

// TestGoreleaserTaggedRelease runs the real release of each provider, publish included, the way
// the documented procedure does (.goreleaser.yaml's top comment, release/README.md):
//
//	KAIROS_PROVIDER=<provider> GORELEASER_CURRENT_TAG=v0.2.0 \
//	  goreleaser release --clean --skip=validate --release-notes=notes.md
//
// after writing the clusterctl repository files of both providers with the release tool, as
// `make release-repo` does. The GitHub API is a fake served by the test (fakeGitHub), reached
// through the config's github_urls section, with a dummy GITHUB_TOKEN. From what the fake
// received, the test checks that the release was created in the provider's own release
// repository (kairos-capi/bootstrap-kairos or kairos-capi/control-plane-kairos) as a draft
// with tag v0.2.0, the name and the notes given, and published once every asset was uploaded;
// that the assets are exactly the provider's manager (one binary archive per target),
// checksums.txt and every file of its clusterctl repository folder <label>/v0.2.0/ (its
// components YAML, metadata.yaml and, for the control plane, the cluster templates), each
// byte for byte the file on disk; and that nothing of the other provider was built or
// uploaded, although its folder sits next to it in the same tree. A last run, of the
// bootstrap provider without its folder (the control plane's only), must fail without
// publishing anything: the release's own files are required, not merely globbed.
//
// Besides the test config's dist folder and single target (testConfig) and github_urls, the
// run differs from the documented one in three ways:
//
//   - --skip=ko. Not a snapshot, so goreleaser v2.15.1's ko pipe would build both
//     platforms' images on gcr.io/distroless/static:nonroot and push them to ghcr.io
//     (internal/pipe/ko/ko.go Publish -> doBuild, ko's publish.NewDefault): neither registry
//     is reachable here, and there is no Docker daemon or local registry to stand in (see
//     TestGoreleaserSnapshotRelease). The images are not release assets; the rest of the
//     pipeline runs, publish included.
//   - The clusterctl files are written to a fresh folder out/goreleaser-test-*/ instead of
//     out/ itself (which may hold a developer's own release folders, or another test run's):
//     every release.extra_files glob must start with "out/", and the test config moves that
//     prefix into the fresh folder, keeping the rest of the glob (the templated label,
//     version and file pattern) as it is. goreleaser v2.15.1 resolves these globs inside the
//     working directory only (internal/extrafiles Find -> github.com/goreleaser/fileglob
//     v1.4.0 Glob, which stats the static prefix in an fs.FS of "."; an absolute glob fails
//     with "stat static prefix .//tmp/...: invalid argument"), hence a folder under out/
//     (ignored by git), removed afterwards, rather than a temporary folder elsewhere.
//   - A remote URL is given through git's environment configuration (see taggedRelease).
func TestGoreleaserTaggedRelease(t *testing.T) {
	const version = "v0.2.0"
	root := repositoryRoot(t)
	gr := goreleaser(t, root)
	goarchs := []string{strings.Split(hostPlatform(t), "_")[0]}
	allTargets := os.Getenv("KAIROS_GORELEASER_ALL_TARGETS") == "1"
	if allTargets {
		goarchs = []string{"amd64", "arm64"}
	}

	// The clusterctl files of v0.2.0 of both providers, as
	// `make release-repo PROVIDER=... VERSION=v0.2.0 OUT=out` writes them (cmd/release calls
	// repo.Build and Release.Write the same way). The series 0.2 is in release/metadata/.
	releases := map[string]*repo.Release{}
	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		r, err := repo.Build(repo.Options{Root: root, Provider: p, Version: version})
		if err != nil {
			t.Fatalf("release tool, %s %s: %v", p.Name, version, err)
		}
		releases[p.Name] = r
	}
	// outTree writes the releases of the given providers into a fresh folder under out/ and
	// returns it, relative to the root, with each provider's release folder.
	outTree := func(providers ...repo.Provider) (string, map[string]string) {
		if _, err := os.Stat(filepath.Join(root, "out")); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(filepath.Join(root, "out"), 0o755); err != nil {
				t.Fatal(err)
			}
			// Registered first, so it runs last; removes out/ only if nothing else is in it.
			t.Cleanup(func() { os.Remove(filepath.Join(root, "out")) })
		}
		out, err := os.MkdirTemp(filepath.Join(root, "out"), "goreleaser-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(out) })
		folders := map[string]string{}
		for _, p := range providers {
			if folders[p.Name], err = releases[p.Name].Write(out); err != nil {
				t.Fatal(err)
			}
		}
		rel, err := filepath.Rel(root, out)
		if err != nil {
			t.Fatal(err)
		}
		return rel, folders
	}
	notesText := "Release notes of the tagged release test.\n\n- one change\n"
	notes := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(notes, []byte(notesText), 0o644); err != nil {
		t.Fatal(err)
	}

	out, folders := outTree(repo.Bootstrap, repo.ControlPlane)
	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		t.Run(p.Name, func(t *testing.T) {
			other := repo.ControlPlane
			if p.Name == other.Name {
				other = repo.Bootstrap
			}
			gh, dist, output, err := taggedRelease(t, root, gr, p, version, out, notes, allTargets)
			if err != nil {
				t.Fatalf("goreleaser release: %v\n%s", err, output)
			}
			rel := gh.onlyRelease(t)
			if rel.Created.TagName != version {
				t.Errorf("release created with tag %q, want %q", rel.Created.TagName, version)
			}
			if want := p.Name + " " + version; rel.Created.Name != want {
				t.Errorf("release created with name %q, want %q", rel.Created.Name, want)
			}
			if strings.TrimSpace(rel.Created.Body) != strings.TrimSpace(notesText) {
				t.Errorf("release body %q, want the notes %q (--release-notes)", rel.Created.Body, notesText)
			}
			if rel.Created.Draft == nil || !*rel.Created.Draft {
				t.Errorf("release not created as a draft (assets would be public while uploading)")
			}
			if rel.Prerelease {
				t.Errorf("%s marked as a pre-release", version)
			}
			if rel.Created.TargetCommitish != "" {
				t.Errorf("release target_commitish %q: the release repository has none of this repository's commits", rel.Created.TargetCommitish)
			}
			if rel.Draft || len(rel.Edits) != 1 || rel.Edits[0].AssetsBefore != len(rel.Assets) {
				t.Errorf("release not published once after every upload: draft %v, edits %+v, %d assets", rel.Draft, rel.Edits, len(rel.Assets))
			}

			// What must be uploaded, with the file on disk it must equal.
			binary := "kairos-" + p.Name + "-manager"
			want := map[string]string{"checksums.txt": filepath.Join(dist, "checksums.txt")}
			var archives []string
			arts := artifacts(t, dist)
			for _, goarch := range goarchs {
				name := binary + "_linux_" + goarch
				archives = append(archives, name)
				for _, a := range arts {
					if a.Name == name && a.Type == "Binary" && a.Extra.Format == "binary" {
						want[name] = a.Path
					}
				}
				if want[name] == "" {
					t.Errorf("artifacts.json has no binary archive %s: %+v", name, arts)
				}
			}
			for _, a := range arts {
				if strings.Contains(a.Name, "kairos-"+other.Name+"-manager") || strings.Contains(a.Path, "kairos-"+other.Name+"-manager") {
					t.Errorf("the %s release built %s of the other provider", p.Name, a.Name)
				}
			}
			entries, err := os.ReadDir(folders[p.Name])
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				want[e.Name()] = filepath.Join(folders[p.Name], e.Name())
			}
			for _, required := range []string{p.ComponentsFile, "metadata.yaml"} {
				if _, ok := want[required]; !ok {
					t.Errorf("the release tool wrote no %s into %s", required, folders[p.Name])
				}
			}
			if p.Templates && !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "cluster-template") }) {
				t.Errorf("the release tool wrote no cluster template into %s", folders[p.Name])
			}
			if _, ok := want[repo.ControlPlane.ExtensionFile]; ok != (p.Name == repo.ControlPlane.Name) {
				t.Errorf("the %s release has %s = %v: it belongs to the control-plane release, and only there", p.Name, repo.ControlPlane.ExtensionFile, ok)
			}

			uploaded := slices.Sorted(maps.Keys(rel.Assets))
			if wantNames := slices.Sorted(maps.Keys(want)); !slices.Equal(uploaded, wantNames) {
				t.Errorf("uploaded assets\n  %v\nwant exactly\n  %v", uploaded, wantNames)
			}
			for _, name := range uploaded {
				if strings.Contains(name, "kairos-"+other.Name+"-manager") || name == other.ComponentsFile {
					t.Errorf("the %s release uploaded %s of the other provider", p.Name, name)
				}
				file, ok := want[name]
				if !ok {
					continue
				}
				onDisk, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(rel.Assets[name], onDisk) {
					t.Errorf("uploaded %s (%d bytes) differs from %s (%d bytes)", name, len(rel.Assets[name]), file, len(onDisk))
				}
			}

			// checksums.txt lists exactly the archives, with the sums of the uploaded bytes.
			sumsFile := filepath.Join(t.TempDir(), "checksums.txt")
			if err := os.WriteFile(sumsFile, rel.Assets["checksums.txt"], 0o644); err != nil {
				t.Fatal(err)
			}
			sums := readChecksums(t, sumsFile)
			if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, archives) {
				t.Errorf("checksums.txt lists %v, want the archives %v", got, archives)
			}
			for _, name := range archives {
				sum := sha256.Sum256(rel.Assets[name])
				if got := sums[name]; got != hex.EncodeToString(sum[:]) {
					t.Errorf("checksums.txt has %q for %s, the uploaded bytes hash to %x", got, name, sum)
				}
			}

			// The uploaded binaries are the provider's manager, for their targets. (The stamped
			// version is not read back: -ldflags are not recorded in the build info of a
			// -trimpath build, and the binaries are stripped, -s -w.)
			for _, name := range archives {
				if rel.Assets[name] == nil {
					continue
				}
				bin := filepath.Join(t.TempDir(), name)
				if err := os.WriteFile(bin, rel.Assets[name], 0o755); err != nil {
					t.Fatal(err)
				}
				info := run(t, root, nil, "go", "version", "-m", bin)
				goarch := strings.TrimPrefix(name, binary+"_linux_")
				for _, want := range []string{"\tpath\tgithub.com/kairos-capi/kairos-capi/" + p.Name + "\n", "\tbuild\tGOARCH=" + goarch + "\n", "\tbuild\tGOOS=linux\n"} {
					if !strings.Contains(info, want) {
						t.Errorf("uploaded %s: build info lacks %q:\n%s", name, strings.TrimSpace(want), info)
					}
				}
			}
		})
	}

	// Without `make release-repo` for the provider (or with another OUT or VERSION), a release
	// must fail, not publish a release without the clusterctl files. goreleaser creates the
	// draft release before it resolves the extra files (internal/pipe/release/release.go
	// doPublish), so the draft stays behind, unpublished and empty. The manager is not built
	// (every build skipped): what is checked happens after the builds and does not depend on
	// them, and the run takes a second instead of a link.
	t.Run("bootstrap without its clusterctl files", func(t *testing.T) {
		out, _ := outTree(repo.ControlPlane)
		gh, _, output, err := taggedRelease(t, root, gr, repo.Bootstrap, version, out, notes, allTargets, func(cfg map[string]any) {
			for _, b := range cfg["builds"].([]any) {
				b.(map[string]any)["skip"] = true
			}
		})
		if err == nil {
			t.Fatalf("goreleaser release succeeded without the clusterctl files:\n%s", output)
		}
		if missing := path.Join(repo.Bootstrap.Label, version, repo.Bootstrap.ComponentsFile); !strings.Contains(output, missing) {
			t.Errorf("the failure does not name %s:\n%s", missing, output)
		}
		if _, releases := gh.snapshot(); len(releases) > 0 && (!releases[0].Draft || len(releases[0].Assets) > 0) {
			t.Errorf("failed release: draft %v, %d assets uploaded; want an empty draft", releases[0].Draft, len(releases[0].Assets))
		}
	})
}

// taggedRelease runs `goreleaser release` of provider p for version, not a snapshot, against
// a fake GitHub (returned with the dist folder, the output and the error), with the clusterctl
// files taken from the tree out (relative to root) instead of out/.
func taggedRelease(t *testing.T, root, gr string, p repo.Provider, version, out, notes string, allTargets bool, edits ...func(cfg map[string]any)) (*fakeGitHub, string, string, error) {
	t.Helper()
	const token = "dummy-github-token"
	releaseRepository := map[string]string{
		repo.Bootstrap.Name:    "bootstrap-kairos",
		repo.ControlPlane.Name: "control-plane-kairos",
	}[p.Name]
	gh := newFakeGitHub(t, "kairos-capi", releaseRepository, token)
	dist := filepath.Join(t.TempDir(), "dist")
	cfg := testConfig(t, root, dist, allTargets, func(cfg map[string]any) {
		if _, ok := cfg["github_urls"]; ok {
			t.Fatal(".goreleaser.yaml sets github_urls; the test expects github.com")
		}
		cfg["github_urls"] = gh.urls()
		rebaseExtraFiles(t, cfg, out)
		for _, edit := range edits {
			edit(cfg)
		}
	})
	env := []string{
		"KAIROS_PROVIDER=" + p.Name, "GORELEASER_CURRENT_TAG=" + version, "GITHUB_TOKEN=" + token,
		// Another token makes goreleaser refuse to choose (internal/pipe/env), a previous tag
		// or a forced token type would change the run: none from the caller.
		"GITLAB_TOKEN=", "GITEA_TOKEN=", "GORELEASER_FORCE_TOKEN=", "GORELEASER_PREVIOUS_TAG=",
		// Outside a snapshot, goreleaser's git pipe needs a remote URL (internal/pipe/git
		// getGitInfo -> getURL: `git ls-remote --get-url`, "couldn't get remote URL"
		// otherwise), which a CI checkout has and a local clone may lack. It is only recorded
		// (the release repository is configured): give one through git's environment
		// configuration rather than touching the checkout's .git/config.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=remote.origin.url", "GIT_CONFIG_VALUE_0=https://github.com/kairos-capi/kairos-capi.git",
	}
	output, err := runCommand(t, root, env, gr, "release", "--clean", "--skip=validate", "--skip=ko", "--release-notes="+notes, "--config", cfg)
	requests, _ := gh.snapshot()
	t.Logf("fake GitHub %s received %d requests", releaseRepository, len(requests))
	return gh, dist, output, err
}

// rebaseExtraFiles moves the release.extra_files globs from out/ to the tree out, a path
// relative to the working directory (the repository root), keeping the rest of each glob.
func rebaseExtraFiles(t *testing.T, cfg map[string]any, out string) {
	t.Helper()
	release, _ := cfg["release"].(map[string]any)
	extra, _ := release["extra_files"].([]any)
	if len(extra) == 0 {
		t.Fatal(".goreleaser.yaml has no release.extra_files: the clusterctl files would not be released")
	}
	for _, e := range extra {
		file, _ := e.(map[string]any)
		glob, _ := file["glob"].(string)
		rest, ok := strings.CutPrefix(glob, "out/")
		if !ok {
			t.Fatalf("release.extra_files glob %q does not start with out/, where make release-repo writes", glob)
		}
		file["glob"] = filepath.ToSlash(out) + "/" + rest
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
