package modules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

// writeTree writes files (slash-separated paths relative to the returned root) into a
// temporary folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The list of the small tree the tests use: an API module inside the module that requires it,
// and an unpublished tool requiring both. The layout is the one Marshal writes.
const testList = `# The modules of the test tree.
repository: example.com/r
modules:
  # The API, nested in the folder of the module that uses it.
  - folder: a/api
    path: example.com/r/a/api
    version: v0.2.0
    published: true
  - folder: a
    path: example.com/r/a
    version: v0.2.0 # the provider
    published: true
  - folder: tool
    path: example.com/r/tool
    version: v0.0.0
    published: false
`

const placeholder = "v0.0.0-00010101000000-000000000000"

func testTree(t *testing.T) string {
	return writeTree(t, map[string]string{
		File:           testList,
		"go.work":      "go 1.26.0\n\nuse (\n\t./a\n\t./a/api\n\t./tool\n)\n",
		"a/api/go.mod": "module example.com/r/a/api\n\ngo 1.26.0\n",
		"a/go.mod": `module example.com/r/a

go 1.26.0

require (
	example.com/r/a/api ` + placeholder + ` // the API
	golang.org/x/mod v0.40.0
)

replace example.com/r/a/api => ./api
`,
		"tool/go.mod": `module example.com/r/tool

go 1.26.0

require example.com/r/a ` + placeholder + `

require example.com/r/a/api ` + placeholder + ` // indirect

replace example.com/r/a/api => ../a/api
`,
	})
}

func load(t *testing.T, root string) *List {
	t.Helper()
	l, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func check(t *testing.T, root string) []Problem {
	t.Helper()
	ps, err := Check(root, load(t, root))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// expectProblems asserts that ps are exactly one problem per entry of want, each in the
// given file and containing every given fragment.
func expectProblems(t *testing.T, ps []Problem, want ...[]string) {
	t.Helper()
	used := make([]bool, len(ps))
	for _, w := range want {
		found := false
		for i, p := range ps {
			if used[i] || p.File != w[0] {
				continue
			}
			all := true
			for _, frag := range w[1:] {
				all = all && strings.Contains(p.Message, frag)
			}
			if all {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no problem in %s containing %q", w[0], w[1:])
		}
	}
	for i, p := range ps {
		if !used[i] {
			t.Errorf("unexpected problem: %s", p)
		}
	}
}

func TestCheckNamesEachRequirementDrift(t *testing.T) {
	root := testTree(t)
	expectProblems(t, check(t, root),
		[]string{"a/go.mod", "requires example.com/r/a/api " + placeholder, "lists v0.2.0", ApplyCommand},
		[]string{"tool/go.mod", "requires example.com/r/a " + placeholder, "lists v0.2.0"},
		[]string{"tool/go.mod", "requires example.com/r/a/api " + placeholder, "lists v0.2.0"},
		[]string{"tool/go.mod", "without `replace example.com/r/a => ../a`", "GOWORK=off"},
	)
}

func TestApplyRewritesRequirementsAndKeepsTheRest(t *testing.T) {
	root := testTree(t)
	written, err := Apply(root, load(t, root))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/go.mod", "tool/go.mod"}; !reflect.DeepEqual(written, want) {
		t.Errorf("wrote %v, want %v", written, want)
	}
	// Comments, other requirements, blocks and replacements stay as they were.
	if got, want := read(t, root, "a/go.mod"), `module example.com/r/a

go 1.26.0

require (
	example.com/r/a/api v0.2.0 // the API
	golang.org/x/mod v0.40.0
)

replace example.com/r/a/api => ./api
`; got != want {
		t.Errorf("a/go.mod:\n%s\nwant:\n%s", got, want)
	}
	if got, want := read(t, root, "tool/go.mod"), `module example.com/r/tool

go 1.26.0

require example.com/r/a v0.2.0

require example.com/r/a/api v0.2.0 // indirect

replace example.com/r/a/api => ../a/api

replace example.com/r/a => ../a
`; got != want {
		t.Errorf("tool/go.mod:\n%s\nwant:\n%s", got, want)
	}
	expectProblems(t, check(t, root))

	// A second run has nothing to do.
	written, err = Apply(root, load(t, root))
	if err != nil || len(written) != 0 {
		t.Errorf("second Apply wrote %v (%v), want nothing", written, err)
	}
}

func TestApplyFollowsSetVersion(t *testing.T) {
	root := testTree(t)
	l := load(t, root)
	if _, err := Apply(root, l); err != nil {
		t.Fatal(err)
	}
	if err := l.SetVersion("a/api", "v0.3.0-rc.1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(root); err != nil {
		t.Fatal(err)
	}
	// The saved list is the file as it was but for that one version.
	if got, want := read(t, root, File), strings.Replace(testList, "version: v0.2.0\n", "version: v0.3.0-rc.1\n", 1); got != want {
		t.Errorf("saved list:\n%s\nwant:\n%s", got, want)
	}
	expectProblems(t, check(t, root),
		[]string{"a/go.mod", "requires example.com/r/a/api v0.2.0", "lists v0.3.0-rc.1"},
		[]string{"tool/go.mod", "requires example.com/r/a/api v0.2.0", "lists v0.3.0-rc.1"},
	)
	written, err := Apply(root, load(t, root))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/go.mod", "tool/go.mod"}; !reflect.DeepEqual(written, want) {
		t.Errorf("wrote %v, want %v", written, want)
	}
	expectProblems(t, check(t, root))
	if tags := load(t, root).Tags(); !reflect.DeepEqual(tags, []string{"a/api/v0.3.0-rc.1", "a/v0.2.0"}) {
		t.Errorf("tags %v", tags)
	}
}

func TestSetVersionRefuses(t *testing.T) {
	l := load(t, testTree(t))
	for _, c := range []struct{ folder, version, want string }{
		{"a", "v0.3", "canonical"},
		{"a", "0.3.0", "canonical"},
		{"a", "v0.3.0+build.1", "canonical"},
		{"a", "v2.0.0", "/v2"},
		{"b", "v0.3.0", `no module in folder "b"`},
	} {
		err := l.SetVersion(c.folder, c.version)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetVersion(%s, %s): want an error containing %q, got %v", c.folder, c.version, c.want, err)
		}
	}
	if m, _ := l.ByFolder("a"); m.Version != "v0.2.0" {
		t.Errorf("a refused version changed the list: %s", m.Version)
	}
}

func TestCheckWorkspaceAndModuleLines(t *testing.T) {
	root := testTree(t)
	if _, err := Apply(root, load(t, root)); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.work":      "go 1.26.0\n\nuse (\n\t./a\n\t./a/api\n\t./other\n)\n",
		"a/api/go.mod": "module example.com/r/api\n\ngo 1.26.0\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	expectProblems(t, check(t, root),
		[]string{"go.work", "does not use ./tool"},
		[]string{File, "does not list folder other"},
		[]string{"a/api/go.mod", `declares module "example.com/r/api"`, "example.com/r/a/api"},
	)
}

func TestCheckPublishedRequiringUnpublished(t *testing.T) {
	root := testTree(t)
	gomod := read(t, root, "a/go.mod")
	gomod = strings.Replace(gomod, "golang.org/x/mod v0.40.0", "golang.org/x/mod v0.40.0\n\texample.com/r/tool v0.0.0", 1) +
		"\nreplace example.com/r/tool => ../tool\n"
	if err := os.WriteFile(filepath.Join(root, "a", "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, load(t, root)); err != nil {
		t.Fatal(err)
	}
	// Apply cannot fix this one: a person must.
	expectProblems(t, check(t, root),
		[]string{"a/go.mod", "published but requires example.com/r/tool", "a/v0.2.0"},
	)
}

func TestValidateRefusesBrokenLists(t *testing.T) {
	cases := map[string]struct {
		edit func(string) string
		want string
	}{
		"short version":        {func(s string) string { return strings.Replace(s, "version: v0.0.0", "version: v0.1", 1) }, "canonical"},
		"build metadata":       {func(s string) string { return strings.Replace(s, "version: v0.0.0", "version: v0.0.0+x", 1) }, "canonical"},
		"major without suffix": {func(s string) string { return strings.Replace(s, "version: v0.0.0", "version: v3.0.0", 1) }, "/v3"},
		"path outside the folder": {func(s string) string {
			return strings.Replace(s, "path: example.com/r/tool", "path: example.com/tool", 1)
		}, "must be example.com/r/tool"},
		"folder twice":            {func(s string) string { return strings.Replace(s, "folder: tool", "folder: a", 1) }, "folder a is listed twice"},
		"folder outside the root": {func(s string) string { return strings.Replace(s, "folder: tool", "folder: ../tool", 1) }, "clean, slash-separated"},
		"bad repository": {func(s string) string {
			return strings.Replace(s, "repository: example.com/r", "repository: Example .com", 1)
		}, "repository"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			edited := c.edit(testList)
			if edited == testList {
				t.Fatal("the edit changed nothing")
			}
			root := writeTree(t, map[string]string{File: edited})
			_, err := Load(root)
			var ce *CheckError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want a CheckError containing %q, got %v", c.want, err)
			}
		})
	}
	root := writeTree(t, map[string]string{File: testList + "  - folder: x\n    tagged: true\n"})
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), "tagged") {
		t.Errorf("an unknown field: want an error naming it, got %v", err)
	}
}

// The repository's own list: every module of go.work, every go.mod at the listed versions,
// the provider modules published under the providers' tags.
func TestRepositoryModules(t *testing.T) {
	root := repositoryRoot(t)
	l := load(t, root)
	expectProblems(t, check(t, root))

	// Marshal writes the file back as it is: -set changes one line.
	data, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, File); string(data) != got {
		t.Errorf("%s is not in the layout Marshal writes; -set would reformat it. Marshal gives:\n%s", File, data)
	}

	published := map[string]bool{}
	for _, m := range l.Modules {
		published[m.Folder] = m.Published
	}
	want := map[string]bool{
		"common": true, "common/provider": true, "bootstrap/api": true, "bootstrap": true,
		"controlplane/api": true, "controlplane": true, "release": false, "test": false,
	}
	if !reflect.DeepEqual(published, want) {
		t.Errorf("published modules %v, want %v", published, want)
	}
	// The provider's release tag is its module's tag: one tag makes both.
	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		m, ok := l.ByFolder(p.Name)
		if !ok || m.Tag() != p.Tag(m.Version) {
			t.Errorf("provider %s: module %+v, want the module in folder %s tagged %s", p.Name, m, p.Name, p.Tag(m.Version))
		}
	}
}
