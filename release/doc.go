// Package release holds the release tooling of the Kairos providers: the repo package
// builds and checks a provider's clusterctl repository folder, cmd/release is its command
// line (make release-repo), and this package's test checks .goreleaser.yaml with the pinned
// goreleaser and builds a snapshot of both manager binaries. See README.md.
package release
