// Package modules keeps the Go modules of this repository consumable from their tags.
//
// release/modules.yaml lists every module of go.work with its release version and whether
// it is published. A published module is tagged <folder>/<version> (the tag form the go
// command looks up for a module in a subfolder of a repository: https://go.dev/ref/mod#vcs-version)
// and other projects require it at that version. For that to work, every go.mod of the
// repository must require its sibling modules at real versions, the listed ones, rather
// than the placeholder v0.0.0-00010101000000-000000000000 a workspace tolerates: a consumer
// ignores the replace directives of its dependencies and resolves those requirements
// through the module proxy. The replace directives to the sibling folders stay, so that
// builds in this tree (GOWORK=off included, which is how the managers are shipped) use the
// tree.
//
// Load reads the list, Check reports every way the tree differs from it, Apply rewrites the
// requirements (with golang.org/x/mod/modfile, which keeps comments and layout), Tags lists
// the tags a release pushes, and WriteProxy serves the tree as a file-based module proxy
// for tests.
package modules

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// File is the module list, relative to the repository root.
const File = "release/modules.yaml"

// Module is one Go module of the repository.
type Module struct {
	// Folder is the module's folder relative to the repository root, slash-separated; it is
	// also the prefix of the module's tags.
	Folder string `yaml:"folder"`
	// Path is the module path (the module line of its go.mod).
	Path string `yaml:"path"`
	// Version is the version every sibling module requires it at; for a published module,
	// the version of its next or current tag.
	Version string `yaml:"version"`
	// Published modules are tagged and may be required by other projects; unpublished ones
	// (the release tooling and the tests) are never tagged.
	Published bool `yaml:"published"`
}

// Tag is the git tag of the module's version: <folder>/<version>.
func (m Module) Tag() string { return m.Folder + "/" + m.Version }

// List is the content of release/modules.yaml.
type List struct {
	// Repository is the module path of the repository root; every module path is
	// Repository/Folder.
	Repository string   `yaml:"repository"`
	Modules    []Module `yaml:"modules"`

	// doc is the file as read, so that Save writes it back with its comments.
	doc *yaml.Node
}

// Problem is one difference between the tree and the module list, or a broken rule of the
// list itself.
type Problem struct {
	// File is the file to change, relative to the repository root.
	File    string
	Message string
}

func (p Problem) String() string { return p.File + ": " + p.Message }

// CheckError lists every problem found.
type CheckError struct {
	Problems []Problem
}

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d module problem(s):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

// asError returns nil for no problems, a *CheckError otherwise.
func asError(ps []Problem) error {
	if len(ps) == 0 {
		return nil
	}
	return &CheckError{Problems: ps}
}

// Load reads and validates release/modules.yaml under root. A list that breaks its own
// rules (Validate) is returned with a *CheckError.
func Load(root string) (*List, error) {
	data, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		return nil, fmt.Errorf("reading the module list: %w", err)
	}
	l, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", File, err)
	}
	return l, asError(l.Validate())
}

// Parse decodes a module list; unknown fields are refused.
func Parse(data []byte) (*List, error) {
	l := &List{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(l); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	l.doc = &doc
	return l, nil
}

// Validate checks the list on its own: paths, versions, no folder or path twice.
func (l *List) Validate() []Problem {
	var out []Problem
	add := func(format string, args ...any) {
		out = append(out, Problem{File: File, Message: fmt.Sprintf(format, args...)})
	}
	if err := module.CheckPath(l.Repository); err != nil {
		add("repository: %v", err)
	}
	if len(l.Modules) == 0 {
		add("lists no module")
	}
	folders, paths := map[string]bool{}, map[string]bool{}
	for _, m := range l.Modules {
		switch {
		case m.Folder == "" || path.IsAbs(m.Folder) || path.Clean(m.Folder) != m.Folder || strings.HasPrefix(m.Folder, "../") || m.Folder == "." || m.Folder == "..":
			add("folder %q must be a clean, slash-separated path below the repository root", m.Folder)
		case folders[m.Folder]:
			add("folder %s is listed twice", m.Folder)
		}
		folders[m.Folder] = true
		if paths[m.Path] {
			add("module %s is listed twice", m.Path)
		}
		paths[m.Path] = true
		// The go command finds the module of tag <folder>/vX.Y.Z in <folder> only when the
		// module path is the repository's path followed by that folder.
		if want := l.Repository + "/" + m.Folder; m.Path != want {
			add("module %s in folder %s: the path must be %s, or the go command does not find it under tag %s", m.Path, m.Folder, want, m.Tag())
		}
		if err := CheckVersion(m.Path, m.Version); err != nil {
			add("module %s: %v", m.Path, err)
		}
	}
	return out
}

// CheckVersion checks that version is a canonical semantic version (vX.Y.Z[-pre], no build
// metadata: tags like v1.2 or v1.2.3+x are not what the go command resolves to) that path can
// carry (v2 and later need the /vN suffix).
func CheckVersion(path, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version vX.Y.Z[-pre] without build metadata", version)
	}
	if err := module.Check(path, version); err != nil {
		if major := semver.Major(version); major != "v0" && major != "v1" {
			return fmt.Errorf("version %s needs a module path ending in /%s (https://go.dev/ref/mod#major-version-suffixes): %w", version, major, err)
		}
		return err
	}
	return nil
}

// ByFolder returns the module in folder.
func (l *List) ByFolder(folder string) (Module, bool) {
	for _, m := range l.Modules {
		if m.Folder == folder {
			return m, true
		}
	}
	return Module{}, false
}

// ByPath returns the module with the module path p.
func (l *List) ByPath(p string) (Module, bool) {
	for _, m := range l.Modules {
		if m.Path == p {
			return m, true
		}
	}
	return Module{}, false
}

// Tags lists the tags of the published modules at their listed versions, in the order of the
// list (a module before the modules that require it, as the file is written).
func (l *List) Tags() []string {
	var tags []string
	for _, m := range l.Modules {
		if m.Published {
			tags = append(tags, m.Tag())
		}
	}
	return tags
}

// SetVersion sets the version of the module in folder, in the list and in the document Save
// writes.
func (l *List) SetVersion(folder, version string) error {
	i := -1
	for j, m := range l.Modules {
		if m.Folder == folder {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("%s lists no module in folder %q", File, folder)
	}
	if err := CheckVersion(l.Modules[i].Path, version); err != nil {
		return fmt.Errorf("module %s: %w", l.Modules[i].Path, err)
	}
	node, err := l.versionNode(folder)
	if err != nil {
		return err
	}
	l.Modules[i].Version = version
	node.Value = version
	node.Style = 0
	node.Tag = "!!str"
	return nil
}

// versionNode finds the version scalar of the module in folder in the document.
func (l *List) versionNode(folder string) (*yaml.Node, error) {
	if l.doc == nil || len(l.doc.Content) != 1 {
		return nil, errors.New("the module list was not read from a file")
	}
	mods := mappingValue(l.doc.Content[0], "modules")
	if mods == nil || mods.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: modules is not a list", File)
	}
	for _, item := range mods.Content {
		if f := mappingValue(item, "folder"); f != nil && f.Value == folder {
			if v := mappingValue(item, "version"); v != nil && v.Kind == yaml.ScalarNode {
				return v, nil
			}
			return nil, fmt.Errorf("%s: module in folder %s has no version", File, folder)
		}
	}
	return nil, fmt.Errorf("%s lists no module in folder %q", File, folder)
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Marshal renders the list as read, with its comments, and with the versions SetVersion set.
func (l *List) Marshal() ([]byte, error) {
	if l.doc == nil {
		return nil, errors.New("the module list was not read from a file")
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(l.doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Save writes the list to release/modules.yaml under root.
func (l *List) Save(root string) error {
	data, err := l.Marshal()
	if err != nil {
		return fmt.Errorf("rendering %s: %w", File, err)
	}
	if err := os.WriteFile(filepath.Join(root, File), data, 0o644); err != nil {
		return fmt.Errorf("writing the module list: %w", err)
	}
	return nil
}
