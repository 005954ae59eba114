// Package token creates the credentials nodes use to join a workload cluster,
// on the management side, so that nobody runs "k0s token create" by hand and
// no node ever calls back for credentials.
//
// k0s: a join token is a kubeconfig (cluster CA, URL, bootstrap-token
// credentials), gzip-compressed and base64-encoded exactly as k0s encodes
// it. Worker tokens point at the Kubernetes API (port 6443 by default) as the
// user "kubelet-bootstrap" and need a bootstrap-token Secret with the
// "authentication" usage; controller tokens point at the k0s join API (port
// 9443) as "controller-bootstrap" and need the "controller-join" usage. The
// Secret can be seeded as a manifest on the first controller
// (K0sBootstrapTokenManifest) and created later through the workload API
// (K0sBootstrapTokenSecretData).
//
// k3s: two tokens per cluster in the secure format, the server token
// K10<sha256 of the cluster CA>::server:<password>, which only servers get,
// and the agent token K10<sha256 of the cluster CA>::node:<password>, which
// agents get and servers accept through --agent-token-file: an agent's
// bootstrap data never holds credentials that could join a server (and read
// the cluster's CA keys from the server bootstrap data). The hash pins the CA a
// joining node downloads from /cacerts before it trusts the server; k3s
// hashes the literal bytes of server-ca.crt when it holds one certificate
// (the DER of the root for a chain), so the token must be computed from the
// exact bytes written to the node.
package token
