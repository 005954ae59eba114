package v1beta2_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestModuleKeepsToTheAPI guards the module boundary of issue 19 (bootstrap/api has the same
// test): this module is the API types, their defaults and their CEL rules, and whatever it
// requires every consumer of the types requires too. Validation that needs the renderer's
// grammar (common/syntax, and through the common module yip) belongs to the providers'
// webhooks (controlplane/validation, common/provider/validation), so neither this module's
// go.mod nor any package it builds, tests included, may reach a module of the repository other
// than the two API modules.
func TestModuleKeepsToTheAPI(t *testing.T) {
	checkAPIModule(t, "github.com/kairos-capi/kairos-capi/controlplane/api", "github.com/kairos-capi/kairos-capi/bootstrap/api")
}

// checkAPIModule, a copy of bootstrap/api's (test code is not shared between modules), fails
// when the go.mod of the module in .. names a forbidden module, or when a package of the module
// (with its tests) imports, directly or not, a package of this repository outside the allowed
// modules, or yip. The import graph is asked of the go command in the workspace, which
// resolves an import even when go.mod lacks its requirement, so both checks are needed.
func checkAPIModule(t *testing.T, allowed ...string) {
	t.Helper()
	const repo = "github.com/kairos-capi/kairos-capi/"
	forbidden := func(path string) bool {
		if strings.HasPrefix(path, "github.com/mudler/yip") {
			return true
		}
		if !strings.HasPrefix(path, repo) {
			return false
		}
		for _, a := range allowed {
			if path == a || strings.HasPrefix(path, a+"/") {
				return false
			}
		}
		return true
	}

	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(gomod), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		for _, f := range fields {
			if forbidden(f) && !strings.HasPrefix(line, "module ") {
				t.Errorf("go.mod:%d names %s: an API module may require only %v of this repository", i+1, f, allowed)
			}
		}
	}

	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps -test ./...: %v\n%s", err, stderr)
	}
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		n++
		if forbidden(pkg) {
			t.Errorf("the module's packages import %s: keep validation that needs it in the providers (common/provider/validation, controlplane/validation)", pkg)
		}
	}
	if n < 10 {
		t.Fatalf("go list found only %d packages: %s", n, out)
	}
}
