// Package pki creates and reads the certificates and keys of a workload
// cluster, using only the standard library.
//
// In kairos-capi the management cluster owns the PKI: the control-plane
// provider creates the cluster CAs (the <cluster>-ca, -etcd, -proxy and -sa
// secrets Cluster API expects), signs the client certificate of the admin kubeconfig, and
// hands the CAs to control-plane nodes as files. Nodes never call back to
// fetch or push credentials, so everything a node trusts comes from here.
//
// All keys are RSA 2048 (PKCS#1 PEM for private keys, PKIX PEM for public
// keys). It is the one algorithm every consumer accepts: k0s, k3s, etcd,
// kube-apiserver, and Cluster API's own secret helpers, which kubeadm-era
// tooling reads with RSA in mind. Service-account keys in particular must be
// RSA: RS256 is the JWT algorithm every token verifier (OIDC discovery,
// webhook authenticators) supports.
package pki
