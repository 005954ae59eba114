package clusterctl

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// Versions of the Kairos providers in the test repositories. newVersion is this tree's code.
// The previous release of each provider (release/releases.yaml, v0.1.0) is built from git
// history. outOfPolicyVersion is this tree's bootstrap provider released as a version outside
// the version-skew policy of control plane newVersion (a series that was never published).
const (
	newVersion         = "v0.2.0"
	outOfPolicyVersion = "v0.4.0"
)

// Names the tests use, from the repository tree.
const (
	providerName          = clusterctlrepo.ProviderName
	simProviderName       = clusterctlrepo.SimProviderName
	simVersion            = clusterctlrepo.SimVersion
	coreNamespace         = clusterctlrepo.CoreNamespace
	bootstrapNamespace    = clusterctlrepo.BootstrapNamespace
	controlPlaneNamespace = clusterctlrepo.ControlPlaneNamespace
	simNamespace          = clusterctlrepo.SimNamespace
)

var (
	reposDir string
	// previous holds the previous release of each provider, by provider name.
	previous  = map[string]*clusterctlrepo.HistoricRelease{}
	reposOnce = sync.OnceValues(func() (*clusterctlrepo.Repositories, error) {
		dir, err := os.MkdirTemp("", "kairos-clusterctl-repo-")
		if err != nil {
			return nil, err
		}
		reposDir = dir
		r, err := clusterctlrepo.Build(dir, newVersion)
		if err != nil {
			return nil, err
		}
		for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
			rel, err := clusterctlrepo.PreviousRelease(p)
			if err != nil {
				return nil, err
			}
			h, err := clusterctlrepo.BuildHistoricRelease(p, rel)
			if err != nil {
				return nil, err
			}
			if err := copyDir(h.RepositoryDir, filepath.Join(dir, p.Label, rel.Version)); err != nil {
				return nil, err
			}
			previous[p.Name] = h
		}
		root, err := framework.RepoRoot()
		if err != nil {
			return nil, err
		}
		rel, err := repo.Build(repo.Options{Root: root, Provider: repo.Bootstrap, Version: outOfPolicyVersion, Metadata: []byte(outOfPolicySeries)})
		if err != nil {
			return nil, err
		}
		if _, err := rel.Write(dir); err != nil {
			return nil, err
		}
		return r, nil
	})
)

// outOfPolicySeries lists the bootstrap provider's published series and the one of
// outOfPolicyVersion.
const outOfPolicySeries = `apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
- {major: 0, minor: 4, contract: v1beta2}
- {major: 0, minor: 2, contract: v1beta2}
- {major: 0, minor: 1, contract: v1beta2}
`

// getRepositories builds the tree once per test binary (TestMain removes it).
func getRepositories() (*clusterctlrepo.Repositories, error) { return reposOnce() }

// previousVersion is the previous release of a provider (built with the repositories).
func previousVersion(t *testing.T, p providerSpec) string {
	t.Helper()
	if _, err := getRepositories(); err != nil {
		t.Fatal(err)
	}
	return previous[p.Name].Version
}

var (
	binDir   string
	binMu    sync.Mutex
	binaries = map[string]string{}
)

// managerBinary returns the manager of a provider at a version clusterctl installed: the
// historic build of its previous release, or this tree's code stamped with the version as a
// release build stamps it (once per version and test binary).
func managerBinary(p providerSpec, version string) (string, error) {
	if _, err := getRepositories(); err != nil {
		return "", err
	}
	if h := previous[p.Name]; h != nil && h.Version == version {
		return h.Binary, nil
	}
	binMu.Lock()
	defer binMu.Unlock()
	key := p.Name + "@" + version
	if b, ok := binaries[key]; ok {
		return b, nil
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "kairos-clusterctl-bin-")
		if err != nil {
			return "", err
		}
		binDir = dir
	}
	b, err := framework.BuildBinary("./"+p.Name, binDir, fmt.Sprintf("%s-manager-%s", p.Name, version), "-ldflags", "-X main.version="+version)
	if err != nil {
		return "", err
	}
	binaries[key] = b
	return b, nil
}

func copyDir(from, to string) error {
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		return fmt.Errorf("copying %s: %w", from, err)
	}
	return nil
}
