// Package syntax is the grammar of the user input that both the admission validation (the
// providers' webhooks: common/provider/validation and controlplane/validation) and the renderer
// (render) check: Kubernetes versions, Linux user and group names, environment variable names
// and manifest names.
//
// There is one copy of each rule so that the layers cannot drift apart: an object admission
// accepts is never refused later by the renderer for its spelling, when a Machine would wait
// for bootstrap data that never comes. The package depends on nothing but the standard library
// and k8s.io/apimachinery's version parser (no client code). The API modules do not import it:
// they keep to types, defaults and CEL rules, so that their consumers do not require this
// module (and yip through it).
package syntax
