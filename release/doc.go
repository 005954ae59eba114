// Package release holds the release tooling of the Kairos providers: the repo package
// builds and checks a provider's clusterctl repository folder, the modules package keeps the
// Go modules consumable from their tags (release/modules.yaml), the preflight package checks a
// checkout before a release, and cmd/release is their command line (make release-repo,
// release modules, release preflight). This package's tests check .goreleaser.yaml with the
// pinned goreleaser, build a snapshot of both manager binaries and run a snapshot release of
// each provider. See README.md.
package release
