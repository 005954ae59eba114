package modules

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

// consumerMain uses both API modules the way a provider or a tool of another project would:
// a KairosControlPlane embedding a KairosConfigSpec, both groups in one scheme.
const consumerMain = `package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{bootstrapv1.AddToScheme, controlplanev1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	replicas := int32(3)
	kcp := &controlplanev1.KairosControlPlane{
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas: &replicas,
			Version:  "v1.31.2+k3s1",
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{
				Role:         bootstrapv1.RoleControlPlane,
				Distribution: bootstrapv1.DistributionK3s,
			},
		},
	}
	for _, obj := range []runtime.Object{kcp, &bootstrapv1.KairosConfig{}} {
		gvks, _, err := scheme.ObjectKinds(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(gvks[0])
	}
	fmt.Println(kcp.Spec.KairosConfigSpec.Distribution, *kcp.Spec.Replicas)
}
`

// consumer is a module outside the repository that uses the API modules through a
// file-based module proxy only.
type consumer struct {
	t        *testing.T
	dir      string
	modcache string
	env      []string
}

// newConsumer prepares a consumer module and its environment: GOWORK=off (no go.work of
// this repository applies), its own module cache (the test's v0.2.0 must neither come from
// nor stay in the shared cache, where it would shadow the real tags), the test proxy first,
// then the shared module cache as a read-only proxy for the third-party modules (no
// network needed for those), then the original GOPROXY without "direct" (a lookup that
// falls through to it fails fast instead of trying git over the network). GONOSUMDB
// exempts this repository's modules from the checksum database: their test zips are not the
// published ones. GOPRIVATE and GONOPROXY are cleared: they would send this repository's
// modules past the proxy.
func newConsumer(t *testing.T, proxy, repository string, seedSums ...string) *consumer {
	t.Helper()
	c := &consumer{t: t, dir: t.TempDir(), modcache: filepath.Join(t.TempDir(), "modcache")}
	sharedCache := strings.TrimSpace(c.output("", nil, "env", "GOMODCACHE"))
	origProxy := strings.TrimSpace(c.output("", nil, "env", "GOPROXY"))
	proxies := []string{"file://" + filepath.ToSlash(proxy), "file://" + filepath.ToSlash(filepath.Join(sharedCache, "cache", "download"))}
	for _, p := range strings.Split(origProxy, ",") {
		if p != "" && p != "direct" {
			proxies = append(proxies, p)
		}
	}
	c.env = []string{
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE=" + c.modcache,
		"GOPROXY=" + strings.Join(proxies, ","),
		"GONOSUMDB=" + repository,
		"GOPRIVATE=",
		"GONOPROXY=",
	}

	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(c.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/kairos-capi-consumer\n\ngo 1.26.0\n")
	write("main.go", consumerMain)
	// The API modules' go.sum files hold every third-party checksum the consumer needs:
	// with them, go get consults no checksum database.
	var sums []string
	for _, f := range seedSums {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	}
	slices.Sort(sums)
	write("go.sum", strings.Join(slices.Compact(sums), "\n")+"\n")
	return c
}

// run runs the go command in the consumer and returns its combined output and error.
func (c *consumer) run(args ...string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	c.t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return string(out), err
}

func (c *consumer) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// output runs the go command with the test's own environment plus env, outside the repository.
func (c *consumer) output(dir string, env []string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = c.dir
	if dir != "" {
		cmd.Dir = dir
	}
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func repositoryRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestConsumerGetsTheAPIModules proves that the API modules can be required by another
// project at the versions of release/modules.yaml once the tags are pushed: the tree's
// published modules are served by a file-based module proxy at those versions, and a
// consumer module outside the repository gets them with `go get`, builds a program using
// both APIs and runs it. Replace directives of the repository do not apply to a consumer,
// so every requirement between the modules must resolve through the proxy.
//
// The build uses -trimpath: compiled packages are then cached by module path and version
// instead of by directory (cmd/go/internal/work/exec.go, buildActionID), so the
// third-party packages compiled once, here or by goreleaser's -trimpath builds, are not
// compiled again from the consumer's own module cache.
func TestConsumerGetsTheAPIModules(t *testing.T) {
	root := repositoryRoot(t)
	l := load(t, root)
	cp, _ := l.ByFolder("controlplane/api")
	bs, _ := l.ByFolder("bootstrap/api")
	if !cp.Published || !bs.Published {
		t.Fatalf("the API modules must be published: %+v %+v", cp, bs)
	}

	proxy := t.TempDir()
	if err := WriteProxy(proxy, root, l, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Unpublished modules are not served.
	for _, m := range l.Modules {
		esc, _ := module.EscapePath(m.Path)
		_, err := os.Stat(filepath.Join(proxy, filepath.FromSlash(esc), "@v", m.Version+".zip"))
		if m.Published != (err == nil) {
			t.Errorf("module %s (published %v): served: %v", m.Path, m.Published, err == nil)
		}
	}

	c := newConsumer(t, proxy, l.Repository, filepath.Join(root, "bootstrap", "api", "go.sum"), filepath.Join(root, "controlplane", "api", "go.sum"))
	// The control-plane API alone first: the bootstrap API must then come from its
	// requirement (what v0.1.0 got wrong: it required a placeholder pseudo-version).
	c.must("get", cp.Path+"@"+cp.Version)
	c.must("build", "-trimpath", "-o", "consumer", ".")
	c.must("get", cp.Path+"@"+cp.Version, bs.Path+"@"+bs.Version)
	c.must("build", "-trimpath", "-o", "consumer", ".")

	// Both modules are the listed versions, from the consumer's module cache (through the
	// proxy), not replaced.
	type listedModule struct {
		Path, Version, Dir string
		Replace            *struct{ Path string }
	}
	var listed []listedModule
	dec := json.NewDecoder(strings.NewReader(c.must("list", "-m", "-json", cp.Path, bs.Path)))
	for dec.More() {
		var m listedModule
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, m)
	}
	for i, want := range []Module{cp, bs} {
		if i >= len(listed) {
			t.Fatalf("go list -m gave %d modules", len(listed))
		}
		got := listed[i]
		if got.Path != want.Path || got.Version != want.Version || got.Replace != nil || !strings.HasPrefix(got.Dir, c.modcache+string(filepath.Separator)) {
			t.Errorf("consumer uses %+v, want %s %s from %s", got, want.Path, want.Version, c.modcache)
		}
	}
	gomod, err := modfile.Parse("go.mod", []byte(read(t, c.dir, "go.mod")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range gomod.Require {
		if strings.HasPrefix(r.Mod.Path, l.Repository+"/") {
			if m, _ := l.ByPath(r.Mod.Path); r.Mod.Version != m.Version {
				t.Errorf("consumer go.mod requires %s %s, want %s", r.Mod.Path, r.Mod.Version, m.Version)
			}
		}
	}

	out := c.output(c.dir, nil, "version", "-m", filepath.Join(c.dir, "consumer"))
	for _, m := range []Module{cp, bs} {
		if !strings.Contains(out, "dep\t"+m.Path+"\t"+m.Version+"\t") {
			t.Errorf("the consumer binary was not built with %s %s:\n%s", m.Path, m.Version, out)
		}
	}
	cmd := exec.Command(filepath.Join(c.dir, "consumer"))
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running the consumer: %v\n%s", err, got)
	}
	want := "controlplane.cluster.x-k8s.io/v1beta2, Kind=KairosControlPlane\nbootstrap.cluster.x-k8s.io/v1beta2, Kind=KairosConfig\nk3s 3\n"
	if string(got) != want {
		t.Errorf("the consumer printed %q, want %q", got, want)
	}
}

// TestConsumerFailsOnAnUnresolvableRequirement is the control of TestConsumerGetsTheAPIModules:
// the same consumer, served a control-plane API whose go.mod requires the bootstrap API at
// the placeholder pseudo-version (as v0.1.0 did), must fail, naming that requirement.
func TestConsumerFailsOnAnUnresolvableRequirement(t *testing.T) {
	root := repositoryRoot(t)
	l := load(t, root)
	cp, _ := l.ByFolder("controlplane/api")
	bs, _ := l.ByFolder("bootstrap/api")

	broken := t.TempDir()
	if err := os.CopyFS(broken, os.DirFS(filepath.Join(root, filepath.FromSlash(cp.Folder)))); err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", []byte(read(t, broken, "go.mod")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AddRequire(bs.Path, placeholder); err != nil {
		t.Fatal(err)
	}
	data, err := f.Format()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "go.mod"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	proxy := t.TempDir()
	now := time.Now()
	if err := AddToProxy(proxy, module.Version{Path: bs.Path, Version: bs.Version}, filepath.Join(root, filepath.FromSlash(bs.Folder)), now); err != nil {
		t.Fatal(err)
	}
	if err := AddToProxy(proxy, module.Version{Path: cp.Path, Version: cp.Version}, broken, now); err != nil {
		t.Fatal(err)
	}

	c := newConsumer(t, proxy, l.Repository, filepath.Join(root, "bootstrap", "api", "go.sum"), filepath.Join(root, "controlplane", "api", "go.sum"))
	out, err := c.run("get", cp.Path+"@"+cp.Version)
	if err == nil {
		out, err = c.run("build", "-trimpath", "-o", "consumer", ".")
	}
	if err == nil {
		t.Fatalf("the consumer built against a control-plane API requiring %s %s:\n%s", bs.Path, placeholder, out)
	}
	if !strings.Contains(out, bs.Path+"@"+placeholder) {
		t.Errorf("the failure does not name %s@%s:\n%s", bs.Path, placeholder, out)
	}
	t.Logf("the consumer failed as it must:\n%s", out)
}
