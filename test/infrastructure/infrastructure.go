// Package infrastructure is a small Cluster API infrastructure provider for the lifecycle
// tests: KairosSimCluster, KairosSimMachine and KairosSimMachinePool (api/v1beta2), reconciled
// by the controllers package on top of the simulated Kairos nodes of test/simnode. Its CRDs and
// deep-copy functions are generated into config/crd/bases by `make generate` (which runs
// `controller-gen object crd paths=./... output:crd:dir=./config/crd/bases` here), and `make
// verify` checks that they are up to date.
package infrastructure

import (
	"fmt"
	"path/filepath"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// CRDFiles returns the provider's CRD files.
func CRDFiles() ([]string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(root, "test", "infrastructure", "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs under test/infrastructure/config/crd/bases")
	}
	return files, nil
}
