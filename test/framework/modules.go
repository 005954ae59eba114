package framework

// ModuleDir returns the module cache folder of a dependency of the test module (for example
// sigs.k8s.io/cluster-api, whose CRDs and webhook manifests the lifecycle harness installs).
func ModuleDir(module string) (string, error) { return moduleDir(module) }
