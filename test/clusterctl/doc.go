// Package clusterctl installs and operates the two Kairos providers the way users do: with the
// clusterctl library (sigs.k8s.io/cluster-api/cmd/clusterctl/client v1.14.2) against real API
// servers (envtest), from clusterctl repositories built by the release module
// (release/repo) in a temporary folder:
//
//	<tmp>/bootstrap-kairos/{v0.1.0,v0.2.0}/      release.Build of the bootstrap provider
//	<tmp>/control-plane-kairos/{v0.1.0,v0.2.0}/  release.Build of the control-plane provider
//	<tmp>/cluster-api/v1.14.2/                   Cluster API's core/config/default (krusty) and metadata.yaml
//	<tmp>/infrastructure-sim/v0.1.0/             the CRDs of test/infrastructure, no controller
//	<tmp>/cert-manager/v1.21.1/                  minimal Issuer and Certificate CRDs
//	<tmp>/clusterctl.yaml                        providers: and cert-manager: (externally provisioned)
//
// The cert-manager CRDs are installed with every API server, so that clusterctl's
// cert-manager check (create and delete a test Issuer and Certificate) passes without a
// download. No kubelet runs: Deployments never get pods. Instead, TestInstalledProvidersRun,
// TestUpgradeOneProviderAtATime and TestMove run the provider managers as local processes
// (built with go build from ./bootstrap and ./controlplane), each with:
//
//   - the container args of the Deployment clusterctl installed (variables substituted), plus
//     local overrides (--leader-elect=false, webhook port and certificate folder, health and
//     diagnostics addresses on free ports);
//   - a kubeconfig that impersonates the ServiceAccount of that Deployment, so that the
//     API server enforces the shipped RBAC; any "forbidden" in a manager's output fails the
//     test;
//   - the installed webhook configurations pointed at the process (url and caBundle of a
//     serving certificate generated for 127.0.0.1), as cert-manager's CA injector and the
//     webhook Service would.
//
// Cluster API's core controllers do not run. The tests do their part by hand where the
// providers depend on it (owner references, infrastructure provisioned, control-plane
// endpoint and initialization, Machine node references), and Cluster API's admission webhooks
// for core types are served in-process (sigs.k8s.io/cluster-api/core/webhooks/admission)
// behind the installed core webhook configurations.
//
// Run everything (about 2.5 minutes on 2 cores; tests run one after the other, at most two
// API servers at a time):
//
//	cd test && go test ./clusterctl/
//
// Run one test alone (each starts its own API servers and runs Init itself):
//
//	cd test && go test ./clusterctl/ -run '^TestMove$' -v
//
// KAIROS_TEST_LOG=1 shows clusterctl's and the in-process webhooks' logs and prints the
// managers' output (<test temp dir>/<cluster>/<provider>.log), which a failing test prints
// anyway. The manager binaries are built once per test binary (about 12 s with a warm build
// cache); TestInit needs none.
package clusterctl
