// Package clustersecret stores the cluster-wide credentials of a Kairos cluster in the
// management cluster: the certificate authorities Cluster API names <cluster>-ca, -etcd,
// -proxy and -sa (in the kubeadm-compatible tls.crt/tls.key format, so that CAPI's own
// kubeconfig and move logic understand them), and the k3s server and agent tokens.
//
// Both providers use it: the control-plane provider creates the credentials up front, the
// bootstrap provider creates them for the first control-plane node when no control-plane
// provider did, and every joining node reads them.
package clustersecret

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// K3sToken is the name suffix of the Secret holding a k3s cluster's tokens: the server
// token under "value" and the agent token under K3sAgentTokenKey.
const K3sToken secret.Purpose = "k3s-token"

// K3sAgentTokenKey is the key of the k3s agent token in the K3sToken Secret.
const K3sAgentTokenKey = "agent-token"

// K3sTokens are the two tokens of a k3s cluster. Servers get both (the agent token with
// --agent-token-file); agents get only Agent, which cannot join a server.
type K3sTokens struct {
	Server, Agent string
}

// caValidity matches what kubeadm and k0s use for cluster CAs.
const caValidity = 10 * 365 * 24 * time.Hour

// ErrMissing reports which cluster credentials do not exist yet.
type ErrMissing struct{ Names []string }

func (e *ErrMissing) Error() string {
	return fmt.Sprintf("cluster secrets %v do not exist yet", e.Names)
}

// IsMissing reports whether err says some credentials do not exist yet.
func IsMissing(err error) bool {
	var m *ErrMissing
	return errors.As(err, &m)
}

// purposes lists the certificate Secrets in a stable order.
var purposes = []secret.Purpose{secret.ClusterCA, secret.EtcdCA, secret.FrontProxyCA, secret.ServiceAccount}

// LookupPKI reads the cluster certificates. It returns an *ErrMissing naming the absent
// Secrets when not all of them exist.
func LookupPKI(ctx context.Context, c client.Reader, cluster client.ObjectKey) (*render.PKI, error) {
	pairs := map[secret.Purpose]*pki.KeyPair{}
	var missing []string
	for _, p := range purposes {
		kp, err := getKeyPair(ctx, c, cluster, p)
		if apierrors.IsNotFound(err) {
			missing = append(missing, secret.Name(cluster.Name, p))
			continue
		}
		if err != nil {
			return nil, err
		}
		pairs[p] = kp
	}
	if len(missing) > 0 {
		return nil, &ErrMissing{Names: missing}
	}
	return &render.PKI{
		ClusterCA:      *pairs[secret.ClusterCA],
		EtcdCA:         *pairs[secret.EtcdCA],
		FrontProxyCA:   *pairs[secret.FrontProxyCA],
		ServiceAccount: *pairs[secret.ServiceAccount],
	}, nil
}

// LookupOrGeneratePKI reads the cluster certificates and creates the missing ones, owned by
// owner. Concurrent creators race on Create; the loser gets an error and retries the lookup.
func LookupOrGeneratePKI(ctx context.Context, c client.Client, cluster client.ObjectKey, owner metav1.OwnerReference) (*render.PKI, error) {
	for _, p := range purposes {
		_, err := getKeyPair(ctx, c, cluster, p)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		kp, err := generate(p)
		if err != nil {
			return nil, fmt.Errorf("generating %s: %w", secret.Name(cluster.Name, p), err)
		}
		s := newSecret(cluster, p, owner, map[string][]byte{secret.TLSCrtDataName: kp.Cert, secret.TLSKeyDataName: kp.Key})
		if err := c.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	return LookupPKI(ctx, c, cluster)
}

// CACertificate reads only the cluster CA certificate, which is all a worker join needs.
func CACertificate(ctx context.Context, c client.Reader, cluster client.ObjectKey) ([]byte, error) {
	kp, err := getKeyPair(ctx, c, cluster, secret.ClusterCA)
	if apierrors.IsNotFound(err) {
		return nil, &ErrMissing{Names: []string{secret.Name(cluster.Name, secret.ClusterCA)}}
	}
	if err != nil {
		return nil, err
	}
	return kp.Cert, nil
}

// LookupK3sTokens reads the k3s cluster's tokens. It returns an *ErrMissing while the Secret,
// or its agent token, does not exist.
func LookupK3sTokens(ctx context.Context, c client.Reader, cluster client.ObjectKey) (K3sTokens, error) {
	s, err := getK3sTokenSecret(ctx, c, cluster)
	if err != nil {
		return K3sTokens{}, err
	}
	t := K3sTokens{Server: string(s.Data[secret.KubeconfigDataName]), Agent: string(s.Data[K3sAgentTokenKey])}
	switch {
	case t.Server == "":
		return K3sTokens{}, fmt.Errorf("secret %s has no %q key", s.Name, secret.KubeconfigDataName)
	case t.Agent == "":
		return K3sTokens{}, &ErrMissing{Names: []string{s.Name + " key " + K3sAgentTokenKey}}
	}
	return t, nil
}

func getK3sTokenSecret(ctx context.Context, c client.Reader, cluster client.ObjectKey) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, K3sToken)}, s)
	if apierrors.IsNotFound(err) {
		return nil, &ErrMissing{Names: []string{secret.Name(cluster.Name, K3sToken)}}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the k3s token Secret: %w", err)
	}
	return s, nil
}

// LookupOrGenerateK3sToken reads the k3s server token, creating the cluster's token Secret
// (server and agent token, both pinned to the cluster CA) when it does not exist yet, and
// adding the agent token to a Secret written before agent tokens existed.
func LookupOrGenerateK3sToken(ctx context.Context, c client.Client, cluster client.ObjectKey, caCert []byte, owner metav1.OwnerReference) (string, error) {
	s, err := getK3sTokenSecret(ctx, c, cluster)
	if err != nil && !IsMissing(err) {
		return "", err
	}
	agent, aerr := token.NewK3sAgentToken(caCert)
	if aerr != nil {
		return "", fmt.Errorf("generating the k3s agent token: %w", aerr)
	}
	if err == nil {
		server := string(s.Data[secret.KubeconfigDataName])
		if server == "" {
			return "", fmt.Errorf("secret %s has no %q key", s.Name, secret.KubeconfigDataName)
		}
		if len(s.Data[K3sAgentTokenKey]) > 0 {
			return server, nil
		}
		patch := client.MergeFrom(s.DeepCopy())
		s.Data[K3sAgentTokenKey] = []byte(agent)
		if err := c.Patch(ctx, s, patch); err != nil {
			return "", fmt.Errorf("adding the agent token to Secret %s: %w", s.Name, err)
		}
		return server, nil
	}
	server, err := token.NewK3sToken(caCert)
	if err != nil {
		return "", fmt.Errorf("generating the k3s token: %w", err)
	}
	ns := newSecret(cluster, K3sToken, owner, map[string][]byte{secret.KubeconfigDataName: []byte(server), K3sAgentTokenKey: []byte(agent)})
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating Secret %s: %w", ns.Name, err)
	}
	return server, nil
}

func getKeyPair(ctx context.Context, c client.Reader, cluster client.ObjectKey, p secret.Purpose) (*pki.KeyPair, error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, p)}, s); err != nil {
		return nil, err
	}
	crt, key := s.Data[secret.TLSCrtDataName], s.Data[secret.TLSKeyDataName]
	if len(crt) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("secret %s must hold both %s and %s", s.Name, secret.TLSCrtDataName, secret.TLSKeyDataName)
	}
	return &pki.KeyPair{Cert: crt, Key: key}, nil
}

func generate(p secret.Purpose) (*pki.KeyPair, error) {
	switch p {
	case secret.ServiceAccount:
		return pki.NewServiceAccountKeyPair()
	case secret.EtcdCA:
		return pki.NewCA("etcd-ca", caValidity)
	case secret.FrontProxyCA:
		return pki.NewCA("front-proxy-ca", caValidity)
	default:
		return pki.NewCA("kubernetes-ca", caValidity)
	}
}

func newSecret(cluster client.ObjectKey, p secret.Purpose, owner metav1.OwnerReference, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       cluster.Namespace,
			Name:            secret.Name(cluster.Name, p),
			Labels:          map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Type: clusterv1.ClusterSecretType,
		Data: data,
	}
}
