// Package crd embeds the generated CustomResourceDefinitions of the bootstrap provider, so
// that offline tools (the preview command) can apply the same schema limits the API server
// applies. The YAML files next to it stay the source kustomize builds from.
package crd

import _ "embed"

// KairosConfig is the KairosConfig CRD, as make generate writes it.
//
//go:embed bases/bootstrap.cluster.x-k8s.io_kairosconfigs.yaml
var KairosConfig []byte
