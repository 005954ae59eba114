// Package infrastructure is a small Cluster API infrastructure provider for the lifecycle
// tests: KairosSimCluster and KairosSimMachine (api/v1beta2), reconciled by the controllers
// package on top of the simulated Kairos nodes of test/simnode. Its CRDs are generated into
// config/crd/bases with the repository's controller-gen:
//
//	cd test/infrastructure && ../../bin/controller-gen-v0.21.0 object crd paths=./... output:crd:dir=./config/crd/bases
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
