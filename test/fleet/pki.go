package fleet

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// Certificates are real X.509 and every check a client or server makes is real. What the fleet
// saves is key generation: CAs it makes itself are ECDSA P-256 (tens of microseconds, where the
// RSA-2048 keys kairos-capi makes cost tens of milliseconds, minutes for thousands of clusters),
// and one ECDSA serving key is shared by every server certificate of the fleet, each
// certificate signed by its own cluster's CA. A client verifies the chain, not the key's
// uniqueness, so neither changes what a client accepts or refuses; CAs handed in by the caller
// (the management cluster's <cluster>-ca and <cluster>-etcd) may be RSA and are used as they are.

type ca struct {
	kp   pki.KeyPair
	cert *x509.Certificate
	key  crypto.Signer
	pool *x509.CertPool
}

func parseCA(kp pki.KeyPair) (*ca, error) {
	cert, key, err := pki.ParseKeyPair(kp)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("the certificate of %q is not a CA", cert.Subject.CommonName)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &ca{kp: kp, cert: cert, key: key, pool: pool}, nil
}

func serial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func encodeECKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding an ECDSA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// NewCA makes a self-signed ECDSA CA, valid ten years, in the PEM form the management cluster's
// CA Secrets hold.
func NewCA(commonName string) (*pki.KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of CA %s: %w", commonName, err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA %s: %w", commonName, err)
	}
	keyPEM, err := encodeECKey(key)
	if err != nil {
		return nil, err
	}
	return &pki.KeyPair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: keyPEM}, nil
}

// sign issues a certificate for pub, signed by the CA.
func (c *ca) sign(tmpl *x509.Certificate, pub crypto.PublicKey, validity time.Duration) ([]byte, error) {
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = sn
	tmpl.NotBefore = now.Add(-5 * time.Minute)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, pub, c.key)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate for %s with CA %s: %w", tmpl.Subject.CommonName, c.cert.Subject.CommonName, err)
	}
	return der, nil
}

// serving issues a server certificate for the shared serving key, for these IP addresses and
// names.
func (c *ca) serving(key *ecdsa.PrivateKey, commonName string, ips []net.IP, names []string) (tls.Certificate, error) {
	der, err := c.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: names,
	}, key.Public(), 365*24*time.Hour)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// client issues a client certificate with a key of its own.
func (c *ca) client(commonName string, organizations []string) (*pki.KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of client %s: %w", commonName, err)
	}
	der, err := c.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: organizations},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public(), 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeECKey(key)
	if err != nil {
		return nil, err
	}
	return &pki.KeyPair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: keyPEM}, nil
}

// Kubeconfig returns an administrator's kubeconfig for the cluster, in the shape Cluster API
// writes to <cluster>-kubeconfig (user <cluster>-admin, system:masters, signed by the cluster's
// CA), so tests without a management cluster can use one.
func (c *Cluster) Kubeconfig() ([]byte, error) {
	kp, err := c.ca.client("kubernetes-admin", []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	return KubeconfigFor(c.spec.Name, "https://"+c.Endpoint(), c.ca.kp.Cert, *kp)
}

// KubeconfigFor builds a kubeconfig for a server with its CA and a client certificate.
func KubeconfigFor(clusterName, server string, caPEM []byte, user pki.KeyPair) ([]byte, error) {
	userName := clusterName + "-admin"
	ctxName := userName + "@" + clusterName
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{clusterName: {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{userName: {ClientCertificateData: user.Cert, ClientKeyData: user.Key}},
		Contexts:       map[string]*clientcmdapi.Context{ctxName: {Cluster: clusterName, AuthInfo: userName}},
		CurrentContext: ctxName,
	}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of %s: %w", clusterName, err)
	}
	return b, nil
}

// RESTConfig returns an administrator's client configuration for the cluster.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	kc, err := c.Kubeconfig()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig of %s: %w", c.spec.Name, err)
	}
	return cfg, nil
}

// EtcdClientCertificate returns a client certificate for the cluster's etcd, signed by its etcd
// CA, as the control plane signs its own (etcdclient.go).
func (c *Cluster) EtcdClientCertificate(commonName string) (*pki.KeyPair, error) {
	return c.etcdCA.client(commonName, nil)
}
