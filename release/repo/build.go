// Package repo builds the clusterctl provider repository of one release of a Kairos
// provider: <out>/<provider label>/<version>/ with the components YAML (built in process with
// kustomize's krusty), metadata.yaml and, for the control-plane provider, the cluster
// templates and the in-place update extension's ExtensionConfig. Everything is checked against the clusterctl provider contract before anything
// is written; see the Rule* constants.
package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Options selects the release to build.
type Options struct {
	// Root is the repository root (the folder with go.work).
	Root string
	// Provider is the provider to release.
	Provider Provider
	// Version is the release version, vX.Y.Z.
	Version string
	// ImageRepository overrides the provider's default manager image repository.
	ImageRepository string
	// Metadata, when set, is the release series file to use instead of the provider's
	// MetadataFile: tests build releases of series that were never published.
	Metadata []byte
}

// Release is a built and checked release, not yet written.
type Release struct {
	Provider Provider
	Version  string
	// Files maps file names to contents.
	Files map[string][]byte
	// Warnings are problems that do not fail the release.
	Warnings []string
}

// FileNames returns the release's file names, sorted.
func (r *Release) FileNames() []string {
	names := make([]string, 0, len(r.Files))
	for n := range r.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Build builds the release in memory and checks every rule. When rules are broken it
// returns a *CheckError listing all of them (and no Release).
func Build(opts Options) (*Release, error) {
	p := opts.Provider
	if p.Name == "" {
		return nil, errors.New("no provider given")
	}
	if opts.Root == "" {
		return nil, errors.New("no repository root given")
	}
	var out violations
	fail := func() error { return &CheckError{Provider: p.Label, Version: opts.Version, Violations: out} }

	v, err := ParseVersion(opts.Version)
	if err != nil {
		out.add(RuleVersion, "", "", "%v", err)
		return nil, fail()
	}

	mdData := opts.Metadata
	if mdData == nil {
		if mdData, err = os.ReadFile(filepath.Join(opts.Root, p.MetadataFile)); err != nil {
			return nil, fmt.Errorf("reading the release series of %s: %w", p.Name, err)
		}
	}
	md, vs := LoadMetadata(p.MetadataFile, mdData)
	out = append(out, vs...)
	if md != nil {
		out = append(out, CheckSeries(md, v, p.MetadataFile)...)
	}
	if len(out) > 0 {
		return nil, fail()
	}

	r := &Release{Provider: p, Version: opts.Version, Files: map[string][]byte{}}
	r.Files["metadata.yaml"], err = RenderMetadata(md, p.MetadataFile)
	if err != nil {
		return nil, err
	}

	components, err := BuildProviderComponents(opts.Root, p, opts.ImageRepository, opts.Version)
	if err != nil {
		return nil, err
	}
	vs, r.Warnings = CheckComponents(p, opts.Version, opts.ImageRepository, components)
	out = append(out, vs...)
	r.Files[p.ComponentsFile] = components

	if p.ExtensionDir != "" {
		if r.Files[p.ExtensionFile], err = Kustomize(filepath.Join(opts.Root, p.ExtensionDir)); err != nil {
			return nil, fmt.Errorf("building %s: %w", p.ExtensionFile, err)
		}
	}
	if p.Templates {
		templates, vs, err := BuildTemplates(opts.Root)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
		for name, data := range templates {
			r.Files[name] = data
		}
	}
	if len(out) > 0 {
		return nil, fail()
	}
	return r, nil
}

// Kustomize builds a kustomization in process, with kustomize's default options (files only
// from within each kustomization's root, built-in plugins only).
func Kustomize(dir string) ([]byte, error) {
	m, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	data, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return quoteNames(data), nil
}

// wholeName matches a value that is the cluster name or the namespace alone, as
// sigs.k8s.io/yaml writes it: a mapping value or a sequence item.
var wholeName = regexp.MustCompile(`(?m)(: |- )(\$\{(?:CLUSTER_NAME|NAMESPACE)\})$`)

// quoteNames double-quotes every value that is the cluster name or the namespace alone.
// kustomize writes its output through JSON, which drops the quotes the sources have, and
// clusterctl substitutes the variables as text: a valid cluster or namespace named "on", "yes"
// or "n" would otherwise become a YAML boolean and the objects would not decode.
func quoteNames(data []byte) []byte {
	return wholeName.ReplaceAll(data, []byte(`${1}"${2}"`))
}

func kustomize(dir string) (resmap.ResMap, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m, nil
}

// BuildProviderComponents builds the components YAML of a release of a Kairos provider:
// BuildComponents with the release's manager image, and every CRD annotated with the
// provider's ReleaseAnnotation set to the version.
func BuildProviderComponents(root string, p Provider, imageRepository, version string) ([]byte, error) {
	m, err := kustomize(filepath.Join(root, p.ConfigDir))
	if err != nil {
		return nil, err
	}
	if err := setManagerImage(m, p.ImageReference(imageRepository, version)); err != nil {
		return nil, err
	}
	for _, res := range m.Resources() {
		if res.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := res.PipeE(kyaml.SetAnnotation(p.ReleaseAnnotation, version)); err != nil {
			return nil, fmt.Errorf("%s: setting annotation %s: %w", res.CurId(), p.ReleaseAnnotation, err)
		}
	}
	return m.AsYaml()
}

// BuildComponents builds a provider's components YAML and sets the image of every container
// named manager to image.
func BuildComponents(configDir, image string) ([]byte, error) {
	m, err := kustomize(configDir)
	if err != nil {
		return nil, err
	}
	if err := setManagerImage(m, image); err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// setManagerImage sets the image of every container named manager of every Deployment.
func setManagerImage(m resmap.ResMap, image string) error {
	for _, res := range m.Resources() {
		if res.GetKind() != "Deployment" {
			continue
		}
		containers, err := res.Pipe(kyaml.Lookup("spec", "template", "spec", "containers"))
		if err != nil {
			return fmt.Errorf("%s: %w", res.CurId(), err)
		}
		if containers == nil {
			continue
		}
		elements, err := containers.Elements()
		if err != nil {
			return fmt.Errorf("%s: %w", res.CurId(), err)
		}
		for _, c := range elements {
			if kyaml.GetValue(c.Field("name").Value) != "manager" {
				continue
			}
			if err := c.PipeE(kyaml.SetField("image", kyaml.NewStringRNode(image))); err != nil {
				return fmt.Errorf("%s: setting the manager image: %w", res.CurId(), err)
			}
		}
	}
	return nil
}

// Write writes the release into out/<label>/<version>/, replacing that folder only: other
// versions and other providers already in out stay as they are. It returns the folder.
func (r *Release) Write(out string) (string, error) {
	parent := filepath.Join(out, r.Provider.Label)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	dir := filepath.Join(parent, r.Version)
	tmp, err := os.MkdirTemp(parent, "."+r.Version+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, name := range r.FileNames() {
		if err := os.WriteFile(filepath.Join(tmp, name), r.Files[name], 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// FindRoot returns the repository root: the nearest folder at or above start with go.work.
func FindRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", err
	}
	start = dir
	for {
		if info, err := os.Stat(filepath.Join(dir, "go.work")); err == nil && !info.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work at or above %s: run from the repository or pass -root", start)
		}
		dir = parent
	}
}
