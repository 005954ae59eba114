package modules

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// TestModuleGraphPicture: the module graph the README draws (a mermaid block of "from --> to"
// lines, published modules only) is the graph the go.mod files declare, and in it the
// control-plane provider never requires the bootstrap provider's module, only its API.
func TestModuleGraphPicture(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	l, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, m := range l.Modules {
		if !m.Published {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, goModFile(m)))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.ParseLax(goModFile(m), data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Require {
			if dep, ok := l.ByPath(r.Mod.Path); ok {
				declared = append(declared, m.Folder+" --> "+dep.Folder)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```mermaid\ngraph LR\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no mermaid module graph (```mermaid / graph LR)")
	}
	var drawn []string
	for _, line := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		drawn = append(drawn, strings.Join(strings.Fields(line), " "))
	}
	slices.Sort(declared)
	slices.Sort(drawn)
	if !slices.Equal(declared, drawn) {
		t.Errorf("the README's module graph differs from the go.mod files:\ndrawn    %q\ndeclared %q", drawn, declared)
	}
	if slices.Contains(declared, "controlplane --> bootstrap") {
		t.Error("the control-plane module requires the bootstrap provider module: it must require only bootstrap/api and common modules")
	}
}
