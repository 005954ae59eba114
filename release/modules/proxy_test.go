package modules

import (
	"archive/zip"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"golang.org/x/mod/module"
)

func TestAddToProxy(t *testing.T) {
	src := writeTree(t, map[string]string{
		"go.mod":             "module example.com/R/a\n\ngo 1.26.0\n",
		"a.go":               "package a\n",
		"api/types.go":       "package api\n",
		"nested/go.mod":      "module example.com/R/a/nested\n\ngo 1.26.0\n",
		"nested/nested.go":   "package nested\n",
		".git/config":        "[core]\n",
		"testdata/input.txt": "kept\n",
	})
	proxy := t.TempDir()
	when := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	mv := module.Version{Path: "example.com/R/a", Version: "v0.2.0"}
	if err := AddToProxy(proxy, mv, src, when); err != nil {
		t.Fatal(err)
	}
	// Upper case is escaped in proxy paths (!r).
	vdir := filepath.Join(proxy, "example.com", "!r", "a", "@v")

	zr, err := zip.OpenReader(filepath.Join(vdir, "v0.2.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	// The nested module and .git are not part of the module; file names in the zip are
	// not escaped.
	want := []string{
		"example.com/R/a@v0.2.0/a.go",
		"example.com/R/a@v0.2.0/api/types.go",
		"example.com/R/a@v0.2.0/go.mod",
		"example.com/R/a@v0.2.0/testdata/input.txt",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("zip holds %v, want %v", names, want)
	}

	if got := read(t, vdir, "v0.2.0.mod"); got != "module example.com/R/a\n\ngo 1.26.0\n" {
		t.Errorf(".mod is %q", got)
	}
	var info struct {
		Version string
		Time    time.Time
	}
	if err := json.Unmarshal([]byte(read(t, vdir, "v0.2.0.info")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "v0.2.0" || !info.Time.Equal(when) {
		t.Errorf(".info is %+v", info)
	}

	// Another version is added to the list, the same version is not listed twice.
	for _, v := range []string{"v0.2.1", "v0.2.0"} {
		if err := AddToProxy(proxy, module.Version{Path: mv.Path, Version: v}, src, when); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, vdir, "list"); got != "v0.2.0\nv0.2.1\n" {
		t.Errorf("list is %q", got)
	}

	if err := AddToProxy(proxy, module.Version{Path: mv.Path, Version: "v0.3.0"}, t.TempDir(), when); err == nil {
		t.Error("a folder without go.mod was added")
	}
	if _, err := os.Stat(filepath.Join(vdir, "v0.3.0.zip")); !os.IsNotExist(err) {
		t.Errorf("a failed version left a zip behind: %v", err)
	}
}
