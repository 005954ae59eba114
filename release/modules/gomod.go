package modules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// ApplyCommand is what fixes the drift Check reports about requirements.
const ApplyCommand = "cd release && go run ./cmd/release modules"

// goModFile is a module's go.mod, relative to the repository root.
func goModFile(m Module) string { return path.Join(m.Folder, "go.mod") }

// Check compares the tree under root with the list: go.work uses exactly the listed
// folders, each folder's go.mod declares the listed path, and every go.mod requires its
// sibling modules at the listed versions and replaces them with their folders. A published
// module may not require an unpublished one (no consumer could resolve it). It returns every
// problem; an error only when a file cannot be read at all.
func Check(root string, l *List) ([]Problem, error) {
	out := l.Validate()

	used, err := workspaceFolders(root)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	for _, m := range l.Modules {
		listed[m.Folder] = true
		if !used[m.Folder] {
			out = append(out, Problem{File: "go.work", Message: fmt.Sprintf("does not use ./%s, which %s lists: add it, or remove it from the list", m.Folder, File)})
		}
	}
	for _, f := range sortedKeys(used) {
		if !listed[f] {
			out = append(out, Problem{File: File, Message: fmt.Sprintf("does not list folder %s, which go.work uses: add it with its path, version and whether it is published", f)})
		}
	}

	for _, m := range l.Modules {
		file := goModFile(m)
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if errors.Is(err, fs.ErrNotExist) {
			out = append(out, Problem{File: file, Message: "does not exist"})
			continue
		}
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			out = append(out, Problem{File: file, Message: err.Error()})
			continue
		}
		if f.Module == nil || f.Module.Mod.Path != m.Path {
			got := ""
			if f.Module != nil {
				got = f.Module.Mod.Path
			}
			out = append(out, Problem{File: file, Message: fmt.Sprintf("declares module %q, %s lists %s for folder %s", got, File, m.Path, m.Folder)})
		}
		out = append(out, checkRequirements(file, f, m, l)...)
	}
	return out, nil
}

func checkRequirements(file string, f *modfile.File, self Module, l *List) []Problem {
	var out []Problem
	add := func(format string, args ...any) {
		out = append(out, Problem{File: file, Message: fmt.Sprintf(format, args...)})
	}
	for _, r := range f.Require {
		dep, ok := l.ByPath(r.Mod.Path)
		if !ok {
			if strings.HasPrefix(r.Mod.Path, l.Repository+"/") {
				add("requires %s, which %s does not list", r.Mod.Path, File)
			}
			continue
		}
		if r.Mod.Version != dep.Version {
			add("requires %s %s, %s lists %s: run `%s`", dep.Path, r.Mod.Version, File, dep.Version, ApplyCommand)
		}
		if self.Published && !dep.Published {
			add("module %s is published but requires %s, which is not: no consumer of %s could resolve it", self.Path, dep.Path, self.Tag())
		}
		if !hasFolderReplace(f, self, dep) {
			add("requires %s without `replace %s => %s`: builds of this tree with GOWORK=off would take %s from the module proxy instead of the tree; run `%s`",
				dep.Path, dep.Path, relativeFolder(self.Folder, dep.Folder), dep.Version, ApplyCommand)
		}
	}
	return out
}

// hasFolderReplace reports whether f replaces every version of dep with dep's folder.
func hasFolderReplace(f *modfile.File, self, dep Module) bool {
	for _, r := range f.Replace {
		if r.Old.Path != dep.Path {
			continue
		}
		return r.Old.Version == "" && r.New.Version == "" && modfile.IsDirectoryPath(r.New.Path) &&
			path.Join(self.Folder, filepath.ToSlash(r.New.Path)) == dep.Folder
	}
	return false
}

// relativeFolder is the replacement path of folder to, seen from folder from: ./api,
// ../common (a replacement is a directory only when it starts with ./ or ../).
func relativeFolder(from, to string) string {
	rel, err := filepath.Rel(filepath.FromSlash(from), filepath.FromSlash(to))
	if err != nil {
		// Both are clean relative paths under one root (Validate); this does not happen.
		panic(err)
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	return rel
}

// Apply rewrites every listed module's go.mod so that it requires its sibling modules at the
// listed versions and replaces them with their folders. Comments, indirect markers and
// layout are kept; files that need no change are not written. It returns the files written.
func Apply(root string, l *List) ([]string, error) {
	if err := asError(l.Validate()); err != nil {
		return nil, err
	}
	var written []string
	for _, m := range l.Modules {
		file := goModFile(m)
		abs := filepath.Join(root, filepath.FromSlash(file))
		data, err := os.ReadFile(abs)
		if err != nil {
			return written, fmt.Errorf("reading %s: %w", file, err)
		}
		out, changed, err := Rewrite(file, data, m, l)
		if err != nil {
			return written, err
		}
		if !changed {
			continue
		}
		if err := os.WriteFile(abs, out, 0o644); err != nil {
			return written, fmt.Errorf("writing %s: %w", file, err)
		}
		written = append(written, file)
	}
	return written, nil
}

// Rewrite returns the go.mod data of module self with every requirement of a listed module
// at the listed version and replaced with its folder, and whether anything changed.
func Rewrite(file string, data []byte, self Module, l *List) ([]byte, bool, error) {
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, false, err
	}
	// AddRequire edits f.Require in place: collect first.
	var deps []Module
	for _, r := range f.Require {
		if dep, ok := l.ByPath(r.Mod.Path); ok {
			if r.Mod.Version != dep.Version || !hasFolderReplace(f, self, dep) {
				deps = append(deps, dep)
			}
		}
	}
	if len(deps) == 0 {
		return data, false, nil
	}
	for _, dep := range deps {
		// AddRequire sets the version of the existing line and keeps its comment
		// (// indirect); AddReplace updates an existing replacement of every version of the
		// path, or adds one next to the other replacements.
		if err := f.AddRequire(dep.Path, dep.Version); err != nil {
			return nil, false, fmt.Errorf("%s: %w", file, err)
		}
		if !hasFolderReplace(f, self, dep) {
			if err := f.AddReplace(dep.Path, "", relativeFolder(self.Folder, dep.Folder), ""); err != nil {
				return nil, false, fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	f.Cleanup()
	out := modfile.Format(f.Syntax)
	return out, string(out) != string(data), nil
}

// workspaceFolders returns the folders go.work uses, slash-separated, relative to root.
func workspaceFolders(root string) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, fmt.Errorf("reading go.work: %w", err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, u := range wf.Use {
		used[path.Clean(filepath.ToSlash(u.Path))] = true
	}
	return used, nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
