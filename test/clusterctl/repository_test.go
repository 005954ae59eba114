package clusterctl

import (
	"os"
	"sync"

	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
)

// Versions of the Kairos providers the tests install and upgrade between.
const (
	oldVersion = "v0.1.0"
	newVersion = "v0.2.0"
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
	reposDir  string
	reposOnce = sync.OnceValues(func() (*clusterctlrepo.Repositories, error) {
		dir, err := os.MkdirTemp("", "kairos-clusterctl-repo-")
		if err != nil {
			return nil, err
		}
		reposDir = dir
		return clusterctlrepo.Build(dir, oldVersion, newVersion)
	})
)

// getRepositories builds the tree once per test binary (TestMain removes it).
func getRepositories() (*clusterctlrepo.Repositories, error) { return reposOnce() }
