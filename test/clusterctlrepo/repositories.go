// Package clusterctlrepo builds the clusterctl repository tree the project's clusterctl tests
// and sandbox install from, and points installed webhook configurations at local servers.
package clusterctlrepo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
)

// Versions of the providers in the repositories.
const (
	// ProviderName is the clusterctl name of both Kairos providers.
	ProviderName = "kairos"
	// SimProviderName is the clusterctl name of the simulation infrastructure provider.
	SimProviderName = "sim"
	// SimVersion is the version of the simulation infrastructure provider's repository.
	SimVersion     = "v0.1.0"
	certManagerVer = "v1.21.1"
)

// The namespaces the components YAMLs install into.
const (
	CoreNamespace         = "capi-system"
	BootstrapNamespace    = "kairos-bootstrap-system"
	ControlPlaneNamespace = "kairos-controlplane-system"
	SimNamespace          = "kairos-sim-system"
)

// Repositories is a clusterctl repository tree.
type Repositories struct {
	// Dir is the tree's root.
	Dir string
	// ConfigFile is the clusterctl configuration pointing at the tree.
	ConfigFile string
	// CoreVersion is the version of the cluster-api core provider (the cluster-api module's).
	CoreVersion string
	// Versions are the versions of both Kairos providers in the tree; the configuration points
	// clusterctl at the last one.
	Versions []string
	// CertManagerCRDs must be installed into every management API server: clusterctl only
	// checks that cert-manager works by creating a test Issuer and Certificate.
	CertManagerCRDs []*apiextensionsv1.CustomResourceDefinition
}

// Build writes into dir, from this checkout, the Kairos providers at each of versions (built by
// the release module exactly as `make release-repo` does), Cluster API's core provider from
// the cluster-api module, an infrastructure provider made of the simulation provider's CRDs,
// minimal cert-manager CRDs, and a clusterctl configuration that points at all of them, so
// that nothing is ever downloaded.
func Build(dir string, versions ...string) (*Repositories, error) {
	if len(versions) == 0 {
		return nil, fmt.Errorf("clusterctlrepo: no version to build")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	r := &Repositories{Dir: dir, ConfigFile: filepath.Join(dir, "clusterctl.yaml"), Versions: versions}

	// Our providers, exactly as `make release-repo` builds them.
	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		for _, v := range versions {
			rel, err := repo.Build(repo.Options{Root: root, Provider: p, Version: v})
			if err != nil {
				return nil, fmt.Errorf("release %s %s: %w", p.Name, v, err)
			}
			if _, err := rel.Write(dir); err != nil {
				return nil, err
			}
		}
	}

	if r.CoreVersion, err = writeCoreRepository(dir); err != nil {
		return nil, err
	}
	if err := writeSimRepository(dir); err != nil {
		return nil, err
	}
	if r.CertManagerCRDs, err = writeCertManagerRepository(dir); err != nil {
		return nil, err
	}

	config := fmt.Sprintf(`providers:
- name: cluster-api
  type: CoreProvider
  url: file://%[1]s/cluster-api/%[2]s/core-components.yaml
- name: %[3]s
  type: BootstrapProvider
  url: file://%[1]s/%[4]s/%[5]s/%[6]s
- name: %[3]s
  type: ControlPlaneProvider
  url: file://%[1]s/%[7]s/%[5]s/%[8]s
- name: %[9]s
  type: InfrastructureProvider
  url: file://%[1]s/infrastructure-%[9]s/%[10]s/infrastructure-components.yaml
# The CRDs are installed with the API server: clusterctl only checks that a test Issuer and
# Certificate can be created. The URL is local all the same, so that nothing is ever downloaded.
cert-manager:
  url: file://%[1]s/cert-manager/%[11]s/cert-manager.yaml
  version: %[11]s
  externallyProvisioned: "true"
  timeout: 1m
`, dir, r.CoreVersion, ProviderName,
		repo.Bootstrap.Label, versions[len(versions)-1], repo.Bootstrap.ComponentsFile,
		repo.ControlPlane.Label, repo.ControlPlane.ComponentsFile,
		SimProviderName, SimVersion, certManagerVer)
	if err := os.WriteFile(r.ConfigFile, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// writeCoreRepository builds Cluster API's own components YAML from the cluster-api module in
// the module cache, the way its release does (kustomize of core/config/default, the released
// image), with the module's metadata.yaml.
func writeCoreRepository(dir string) (string, error) {
	capiDir, err := framework.ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return "", err
	}
	_, version, ok := strings.Cut(filepath.Base(capiDir), "@")
	if !ok {
		return "", fmt.Errorf("cannot read the cluster-api version from %s", capiDir)
	}
	components, err := repo.BuildComponents(filepath.Join(capiDir, "core", "config", "default"),
		"registry.k8s.io/cluster-api/cluster-api-controller:"+version)
	if err != nil {
		return "", err
	}
	metadata, err := os.ReadFile(filepath.Join(capiDir, "metadata.yaml"))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "cluster-api", version)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, "core-components.yaml"), components, 0o644); err != nil {
		return "", err
	}
	return version, os.WriteFile(filepath.Join(out, "metadata.yaml"), metadata, 0o644)
}

// writeSimRepository writes an infrastructure provider made of test/infrastructure's CRDs
// (with the contract labels) and a namespace, without a controller: it gives Clusters and
// KairosControlPlane Machines infrastructure objects that clusterctl knows (and moves).
func writeSimRepository(dir string) error {
	files, err := infrastructure.CRDFiles()
	if err != nil {
		return err
	}
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return err
	}
	docs := []any{map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": SimNamespace},
	}}
	for _, crd := range crds {
		crd.APIVersion, crd.Kind = apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
		docs = append(docs, crd)
	}
	components, err := yamlDocuments(docs...)
	if err != nil {
		return err
	}
	metadata := "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contract: " +
		clusterv1.GroupVersion.Version + "\n"
	out := filepath.Join(dir, "infrastructure-"+SimProviderName, SimVersion)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "infrastructure-components.yaml"), components, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "metadata.yaml"), []byte(metadata), 0o644)
}

// writeCertManagerRepository writes minimal cert-manager CRDs (Issuer and Certificate of
// cert-manager.io/v1, any content accepted) as a cert-manager "release" and returns them.
func writeCertManagerRepository(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, kind := range []string{"Issuer", "Certificate"} {
		plural := strings.ToLower(kind) + "s"
		crds = append(crds, &apiextensionsv1.CustomResourceDefinition{
			TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io",
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true),
					}},
				}},
			},
		})
	}
	docs := make([]any, len(crds))
	for i, c := range crds {
		docs[i] = c
	}
	data, err := yamlDocuments(docs...)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "cert-manager", certManagerVer)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	return crds, os.WriteFile(filepath.Join(out, "cert-manager.yaml"), data, 0o644)
}

func yamlDocuments(docs ...any) ([]byte, error) {
	var buf bytes.Buffer
	for i, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(data)
	}
	return buf.Bytes(), nil
}
