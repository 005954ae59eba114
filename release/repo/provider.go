package repo

import (
	"fmt"
	"sort"
	"strings"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// Provider describes one of the two clusterctl providers this repository releases.
type Provider struct {
	// Name is the short name: the -provider flag, the first part of the release tag
	// (<Name>/vX.Y.Z) and of the Go submodule tag.
	Name string
	// Label is the clusterctl provider label and the folder of the repository tree
	// (<out>/<Label>/<version>/); it is also the value of the cluster.x-k8s.io/provider label.
	Label string
	// Type is the clusterctl provider type (clusterctl.yaml providers[].type).
	Type string
	// ConfigDir is the kustomization, relative to the repository root, whose build is the
	// components YAML.
	ConfigDir string
	// ComponentsFile is the components YAML's file name in the repository.
	ComponentsFile string
	// ImageVariable is the clusterctl variable that overrides the manager image.
	ImageVariable string
	// ImageRepository is the default manager image repository; the release version is its tag.
	ImageRepository string
	// ImageEntrypoint is the manager's path inside the released image (ko puts the binary
	// at /ko-app/<last element of the main package's import path>).
	ImageEntrypoint string
	// MetadataFile is the provider's release-series list, relative to the repository root.
	MetadataFile string
	// Templates says whether the provider's repository ships the cluster templates of
	// config/templates.
	Templates bool
	// ExtensionDir, when set, is the kustomization (relative to the repository root) of a
	// runtime extension's ExtensionConfig that ships beside the components as ExtensionFile:
	// applied by hand where Cluster API runs with its RuntimeSDK gate, since Cluster API refuses
	// ExtensionConfigs without it and the components must install everywhere.
	ExtensionDir, ExtensionFile string
	// ReleaseAnnotation is the annotation every CRD of the provider's components carries,
	// naming the release (vX.Y.Z) that installed it: the control-plane provider reads the
	// bootstrap provider's to enforce its version-skew policy.
	ReleaseAnnotation string
}

// The two providers. Their release series are independent (see MetadataFile).
var (
	Bootstrap = Provider{
		Name:              "bootstrap",
		Label:             "bootstrap-kairos",
		Type:              "BootstrapProvider",
		ConfigDir:         "bootstrap/config/default",
		ComponentsFile:    "bootstrap-components.yaml",
		ImageVariable:     "KAIROS_BOOTSTRAP_IMAGE",
		ImageRepository:   "ghcr.io/kairos-capi/kairos-bootstrap-manager",
		ImageEntrypoint:   "/ko-app/bootstrap",
		MetadataFile:      "release/metadata/bootstrap.yaml",
		ReleaseAnnotation: bootstrapv1.ReleaseAnnotation,
	}
	ControlPlane = Provider{
		Name:              "controlplane",
		Label:             "control-plane-kairos",
		Type:              "ControlPlaneProvider",
		ConfigDir:         "controlplane/config/default",
		ComponentsFile:    "control-plane-components.yaml",
		ImageVariable:     "KAIROS_CONTROLPLANE_IMAGE",
		ImageRepository:   "ghcr.io/kairos-capi/kairos-controlplane-manager",
		ImageEntrypoint:   "/ko-app/controlplane",
		MetadataFile:      "release/metadata/controlplane.yaml",
		Templates:         true,
		ExtensionDir:      "controlplane/config/extension",
		ExtensionFile:     "control-plane-extension.yaml",
		ReleaseAnnotation: controlplanev1.ReleaseAnnotation,
	}
)

// Providers lists the providers by Name.
var Providers = map[string]Provider{Bootstrap.Name: Bootstrap, ControlPlane.Name: ControlPlane}

// Lookup returns the provider with the given name (or clusterctl label).
func Lookup(name string) (Provider, error) {
	for _, p := range Providers {
		if name == p.Name || name == p.Label {
			return p, nil
		}
	}
	names := make([]string, 0, len(Providers))
	for n := range Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return Provider{}, fmt.Errorf("unknown provider %q: use one of %s", name, strings.Join(names, ", "))
}

// Tag is the git tag (and Go submodule tag) of a release of this provider.
func (p Provider) Tag(version string) string { return p.Name + "/" + version }

// Image is the default manager image of a release.
func (p Provider) Image(repository, version string) string {
	if repository == "" {
		repository = p.ImageRepository
	}
	return repository + ":" + version
}

// ImageReference is the manager image as written in the components YAML: a clusterctl
// variable whose default is the released image.
func (p Provider) ImageReference(repository, version string) string {
	return "${" + p.ImageVariable + ":=" + p.Image(repository, version) + "}"
}
