// Package flavors checks every cluster template the control-plane provider ships (its
// clusterctl flavors) against the real schemas of the infrastructure provider it is written
// for. The tests (flavors_test.go):
//
//   - build the control-plane provider's clusterctl repository with the release module, the
//     way `make release-repo` does, and render every flavor with the clusterctl library
//     (`clusterctl generate cluster --from <file>` semantics): once with only the required
//     variables (k0s, every default), once with every variable set (k3s); a missing required
//     variable must fail with a message naming it;
//   - start one API server (envtest) with Cluster API's core CRDs, both Kairos providers' CRDs,
//     the sandbox's simulated infrastructure CRDs and the real CRDs of every infrastructure
//     provider (read from the provider's own Go module at a pinned version, see Sources), and
//     create every rendered object with server-side dry-run and strict field validation, so
//     that the providers' OpenAPI schemas and CEL rules run and an unknown field fails;
//   - clone each flavor's infrastructure machine templates with Cluster API's generic
//     external.CreateFromTemplate (what the KairosControlPlane controller and the MachineSet
//     controller do), at the API version Cluster API resolves from the CRDs' contract
//     labels, and check the API server accepts the clone without dropping a field.
//
// No webhook runs: neither Cluster API's nor the Kairos providers' nor the infrastructure
// providers'. The point is the CRD schemas; the Kairos objects' webhook validation is covered
// by the release checks (template-schema) and the test/bootstrap and test/controlplane
// suites. Conversion webhooks are not needed either: every flavor writes each kind at its
// CRD's storage version (checked).
//
// Run it alone from the repository root:
//
//	cd test && go test -count=1 -v ./flavors/
//
// A provider whose Go module the proxy does not serve at any version tried is an explicit
// exclusion (Source.NotServed), logged by the test: today Metal3. Point
// KAIROS_CAPM3_CRDS at the config/crd folder of a cluster-api-provider-metal3 checkout at the
// pinned tag to check the metal3 flavor too; KAIROS_FLAVORS_REQUIRE_ALL=1 turns every
// exclusion into a failure.
package flavors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"
)

// Source is where an infrastructure provider's CRDs come from: the CRD kustomization of
// the provider's own Go module at a pinned version, downloaded with `go mod download` into
// the module cache as data (the test module does not require it: the providers' Go
// dependencies need other Cluster API and controller-runtime versions than this project's).
type Source struct {
	// Name is the provider's clusterctl name (repo.Infrastructure.Name).
	Name string
	// Module and Version pin the provider's Go module.
	Module, Version string
	// Kustomization is the module folder of the provider's CRD kustomization: its resources
	// are the CRD files and its labels (commonLabels, labels) are the contract labels the
	// provider's released components YAML gives them.
	Kustomization string
	// NotServed, when set, says why the module cannot be downloaded here: the provider's
	// flavor is then an explicit, logged exclusion unless LocalEnv names a folder.
	NotServed string
	// LocalEnv names an environment variable that may point at the Kustomization folder of a
	// checkout of the provider at Version, used instead of the module.
	LocalEnv string
}

// Sources are the pinned infrastructure providers. The versions tried through the module
// proxy and what it answered are recorded in config/templates/README.md ("Which provider
// versions the flavors are checked against").
var Sources = map[string]Source{
	"vsphere": {
		Name: "vsphere", Module: "sigs.k8s.io/cluster-api-provider-vsphere", Version: "v1.16.1",
		Kustomization: "config/default/crd",
	},
	"kubevirt": {
		Name: "kubevirt", Module: "sigs.k8s.io/cluster-api-provider-kubevirt", Version: "v0.11.2",
		Kustomization: "config/crd",
	},
	"proxmox": {
		Name: "proxmox", Module: "github.com/ionos-cloud/cluster-api-provider-proxmox", Version: "v0.9.0",
		Kustomization: "config/crd",
	},
	"metal3": {
		Name: "metal3", Module: "github.com/metal3-io/cluster-api-provider-metal3", Version: "v1.13.2",
		Kustomization: "config/crd",
		NotServed: "the Go module proxy serves no version of github.com/metal3-io/cluster-api-provider-metal3 here " +
			"(v1.14.0-rc.0, v1.13.1, v1.13.0, v1.12.7, v1.12.6, v1.12.0, v1.11.8, v1.10.5, v1.9.5: 403 \"not available\"; " +
			"v1.13.2: the proxy answers but the checksum database has no entry (404), so go refuses it)",
		LocalEnv: "KAIROS_CAPM3_CRDS",
	},
}

// ClusterctlLabels are the labels clusterctl adds to every object of a provider's
// components when it installs them (init, upgrade).
func ClusterctlLabels(provider string) map[string]string {
	return map[string]string{
		"clusterctl.cluster.x-k8s.io": "",
		clusterv1.ProviderNameLabel:   "infrastructure-" + provider,
	}
}

// Folder returns the provider's CRD kustomization folder: in the module cache (downloading
// the module when needed), or from LocalEnv. It returns "" and the reason when the provider
// is excluded.
func (s Source) Folder() (dir, excluded string, err error) {
	if s.LocalEnv != "" {
		if local := os.Getenv(s.LocalEnv); local != "" {
			return local, "", nil
		}
	}
	if s.NotServed != "" {
		msg := s.NotServed
		if s.LocalEnv != "" {
			msg += fmt.Sprintf("; set %s to the %s folder of a checkout at %s to check it", s.LocalEnv, s.Kustomization, s.Version)
		}
		return "", msg, nil
	}
	moduleDir, err := DownloadModule(s.Module, s.Version)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(moduleDir, filepath.FromSlash(s.Kustomization)), "", nil
}

// LoadCRDs reads the CRDs of the provider's kustomization with the labels it and clusterctl
// give them.
func (s Source) LoadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources    []string          `json:"resources"`
		CommonLabels map[string]string `json:"commonLabels"`
		Labels       []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	labels := map[string]string{}
	for key, v := range k.CommonLabels {
		labels[key] = v
	}
	for _, l := range k.Labels {
		for key, v := range l.Pairs {
			labels[key] = v
		}
	}
	for key, v := range ClusterctlLabels(s.Name) {
		labels[key] = v
	}
	if len(k.Resources) == 0 {
		return nil, fmt.Errorf("%s/kustomization.yaml lists no CRD", dir)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, r := range k.Resources {
		crds, err := decodeCRDs(filepath.Join(dir, filepath.FromSlash(r)))
		if err != nil {
			return nil, err
		}
		for _, crd := range crds {
			if crd.Labels == nil {
				crd.Labels = map[string]string{}
			}
			for key, v := range labels {
				crd.Labels[key] = v
			}
		}
		out = append(out, crds...)
	}
	return out, nil
}

// ContractLabels returns the cluster.x-k8s.io/<contract> labels of a CRD, as
// "contract=versions" sorted.
func ContractLabels(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for k, v := range crd.Labels {
		if c, ok := strings.CutPrefix(k, clusterv1.GroupVersion.Group+"/"); ok && strings.HasPrefix(c, "v") {
			out = append(out, c+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

func decodeCRDs(file string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: %s %s is not a CRD", file, crd.Kind, crd.Name)
		}
		out = append(out, crd)
	}
}

// DownloadModule downloads module@version into the module cache with `go mod download`
// (through GOPROXY, verified against the checksum database) and returns its folder. It runs
// in a scratch module, so that no go.mod of this repository changes.
func DownloadModule(module, version string) (string, error) {
	scratch, err := os.MkdirTemp("", "kairos-flavors-download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module kairos.test/flavors/download\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v: %s%s", module, version, runErr, out, stderr.String())
	}
	if info.Error != "" || runErr != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s %v %s", module, version, info.Error, runErr, stderr.String())
	}
	return info.Dir, nil
}
