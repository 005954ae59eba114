// Package release will build each provider's clusterctl repository.
package release
