package preflight

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/release/modules"
	"github.com/kairos-capi/kairos-capi/release/repo"
)

const moduleList = `repository: example.com/r
modules:
  - folder: common
    path: example.com/r/common
    version: v0.2.0
    published: true
  - folder: common/provider
    path: example.com/r/common/provider
    version: v0.2.0
    published: true
  - folder: bootstrap
    path: example.com/r/bootstrap
    version: v0.2.0
    published: true
  - folder: controlplane
    path: example.com/r/controlplane
    version: v0.2.0
    published: true
  - folder: release
    path: example.com/r/release
    version: v0.0.0
    published: false
`

// isolateGit makes git in the test (and in Check) ignore the user's and the system's
// configuration and any repository the test runs in.
func isolateGit(t *testing.T) {
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "preflight test",
		"GIT_AUTHOR_EMAIL":    "preflight@example.com",
		"GIT_COMMITTER_NAME":  "preflight test",
		"GIT_COMMITTER_EMAIL": "preflight@example.com",
	} {
		t.Setenv(k, v)
	}
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commit(t *testing.T, root, message string) {
	t.Helper()
	runGit(t, root, "add", "-A")
	runGit(t, root, "commit", "-q", "-m", message)
}

// newRepository makes a git repository with a module tree like this repository's (the
// provider requires common and common/provider, nested in common), committed once and
// tagged for the release of the bootstrap provider v0.2.0 (and its sibling modules).
func newRepository(t *testing.T) string {
	t.Helper()
	isolateGit(t)
	root := t.TempDir()
	files := map[string]string{
		modules.File: moduleList,
		"go.work":    "go 1.26.0\n\nuse (\n\t./bootstrap\n\t./common\n\t./common/provider\n\t./controlplane\n\t./release\n)\n",
		".gitignore": "/out/\n",
		"README.md":  "test tree\n",

		"common/go.mod":  "module example.com/r/common\n\ngo 1.26.0\n",
		"common/util.go": "package common\n",

		"common/provider/go.mod":      "module example.com/r/common/provider\n\ngo 1.26.0\n\nrequire example.com/r/common v0.2.0\n\nreplace example.com/r/common => ..\n",
		"common/provider/provider.go": "package provider\n",

		"bootstrap/go.mod": "module example.com/r/bootstrap\n\ngo 1.26.0\n\nrequire example.com/r/common/provider v0.2.0\n\nrequire example.com/r/common v0.2.0 // indirect\n\n" +
			"replace example.com/r/common => ../common\n\nreplace example.com/r/common/provider => ../common/provider\n",
		"bootstrap/main.go": "package main\n",

		"controlplane/go.mod":  "module example.com/r/controlplane\n\ngo 1.26.0\n",
		"controlplane/main.go": "package main\n",

		"release/go.mod": "module example.com/r/release\n\ngo 1.26.0\n",
	}
	for name, content := range files {
		write(t, root, name, content)
	}
	runGit(t, root, "init", "-q", "-b", "main")
	commit(t, root, "tree")
	for _, tag := range []string{"common/v0.2.0", "common/provider/v0.2.0", "bootstrap/v0.2.0"} {
		runGit(t, root, "tag", tag)
	}
	return root
}

func preflight(root, version string) (string, error) {
	return Check(Options{Root: root, Provider: repo.Bootstrap, Version: version})
}

// expectFailures asserts that err is an *Error with exactly one failure per fragment list,
// each failure containing its fragments.
func expectFailures(t *testing.T, err error, want ...[]string) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("want a preflight *Error, got %v", err)
	}
	used := make([]bool, len(pe.Failures))
	for _, w := range want {
		found := false
		for i, f := range pe.Failures {
			all := !used[i]
			for _, frag := range w {
				all = all && strings.Contains(f, frag)
			}
			if all {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no failure containing %q in:\n%v", w, err)
		}
	}
	for i, f := range pe.Failures {
		if !used[i] {
			t.Errorf("unexpected failure: %s", f)
		}
	}
}

func TestPreflightPasses(t *testing.T) {
	root := newRepository(t)
	// Ignored files (the clusterctl repository tree the release builds) do not count.
	write(t, root, "out/bootstrap-kairos/v0.2.0/metadata.yaml", "x\n")
	got, err := preflight(root, "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if head := runGit(t, root, "rev-parse", "HEAD"); got != head {
		t.Errorf("Check returned %s, HEAD is %s", got, head)
	}
}

func TestPreflightTagOnAnotherCommit(t *testing.T) {
	root := newRepository(t)
	tagged := runGit(t, root, "rev-parse", "HEAD")
	write(t, root, "README.md", "changed after the tag\n")
	commit(t, root, "after the tag")
	_, err := preflight(root, "v0.2.0")
	expectFailures(t, err, []string{"tag bootstrap/v0.2.0 is commit " + tagged[:12], "HEAD is"})
}

func TestPreflightDirtyTree(t *testing.T) {
	for name, edit := range map[string]func(root string){
		"modified": func(root string) { write(t, root, "bootstrap/main.go", "package main // edited\n") },
		"staged": func(root string) {
			write(t, root, "bootstrap/main.go", "package main // edited\n")
			runGit(t, root, "add", "bootstrap/main.go")
		},
		"untracked": func(root string) { write(t, root, "bootstrap/new/new.go", "package new\n") },
	} {
		t.Run(name, func(t *testing.T) {
			root := newRepository(t)
			edit(root)
			_, err := preflight(root, "v0.2.0")
			expectFailures(t, err, []string{"the tree is not clean", "bootstrap/"})
		})
	}
}

func TestPreflightMissingTag(t *testing.T) {
	root := newRepository(t)
	runGit(t, root, "tag", "-d", "bootstrap/v0.2.0")
	// A branch of that name is not the tag.
	runGit(t, root, "branch", "bootstrap/v0.2.0")
	_, err := preflight(root, "v0.2.0")
	expectFailures(t, err, []string{"tag bootstrap/v0.2.0 does not exist"})
}

func TestPreflightVersionNotInTheModuleList(t *testing.T) {
	root := newRepository(t)
	runGit(t, root, "tag", "bootstrap/v0.2.1")
	_, err := preflight(root, "v0.2.1")
	expectFailures(t, err, []string{modules.File, "example.com/r/bootstrap at v0.2.0, not v0.2.1", "-set bootstrap=v0.2.1"})
}

func TestPreflightModuleDrift(t *testing.T) {
	root := newRepository(t)
	write(t, root, "bootstrap/go.mod", strings.Replace(readFile(t, root, "bootstrap/go.mod"),
		"example.com/r/common/provider v0.2.0", "example.com/r/common/provider v0.0.0-00010101000000-000000000000", 1))
	commit(t, root, "drift")
	runGit(t, root, "tag", "-f", "bootstrap/v0.2.0")
	_, err := preflight(root, "v0.2.0")
	expectFailures(t, err, []string{"bootstrap/go.mod", "requires example.com/r/common/provider v0.0.0-00010101000000-000000000000"})
}

func TestPreflightSiblingModules(t *testing.T) {
	t.Run("tag missing", func(t *testing.T) {
		root := newRepository(t)
		runGit(t, root, "tag", "-d", "common/v0.2.0")
		_, err := preflight(root, "v0.2.0")
		expectFailures(t, err, []string{"requires example.com/r/common v0.2.0", "tag common/v0.2.0 does not exist"})
	})
	t.Run("changed since its tag", func(t *testing.T) {
		root := newRepository(t)
		// common/provider changes after its tag; common, which contains its folder, does not:
		// the nested module is not part of common.
		write(t, root, "common/provider/provider.go", "package provider // changed\n")
		commit(t, root, "provider change")
		runGit(t, root, "tag", "-f", "bootstrap/v0.2.0")
		_, err := preflight(root, "v0.2.0")
		expectFailures(t, err, []string{"common/provider changed since common/provider/v0.2.0", "-set common/provider=vX.Y.Z"})
	})
	t.Run("a module the provider does not require", func(t *testing.T) {
		root := newRepository(t)
		// controlplane is neither tagged nor required by bootstrap: not bootstrap's business.
		write(t, root, "controlplane/main.go", "package main // changed\n")
		commit(t, root, "controlplane change")
		runGit(t, root, "tag", "-f", "bootstrap/v0.2.0")
		if _, err := preflight(root, "v0.2.0"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPreflightNotARepository(t *testing.T) {
	isolateGit(t)
	if _, err := preflight(t.TempDir(), "v0.2.0"); err == nil || !strings.Contains(err.Error(), "HEAD") {
		t.Fatalf("want an error reading HEAD, got %v", err)
	}
	root := newRepository(t)
	if _, err := preflight(root, "latest"); err == nil || !strings.Contains(err.Error(), "must start with v") {
		t.Fatalf("want a version error, got %v", err)
	}
}

func readFile(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
