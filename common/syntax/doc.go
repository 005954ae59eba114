// Package syntax is the grammar of the user input that both the API validation (the
// bootstrap and control-plane API packages) and the renderer (render) check: Kubernetes
// versions, Linux user and group names, environment variable names and manifest names.
//
// There is one copy of each rule so that the layers cannot drift apart: an object the API
// accepts is never refused later by the renderer for its spelling, when a Machine would wait
// for bootstrap data that never comes. The package depends on nothing but the standard library
// and k8s.io/apimachinery's version parser (no client code), so that the API modules can import
// it too.
package syntax
