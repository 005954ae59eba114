package simnode

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// clusterPKI is the PKI an init node was given, read from the files its document writes.
type clusterPKI struct {
	// clientCA verifies client certificates (k0s ca.crt, k3s client-ca.crt); kubelet
	// certificates are signed with it.
	clientCA pki.KeyPair
	// serverCA signs the API server's serving certificate (k0s ca.crt, k3s server-ca.crt).
	serverCA pki.KeyPair
	// frontProxyCA verifies requests of aggregated API servers (requestheader).
	frontProxyCA pki.KeyPair
	// etcdCA secures etcd's client port.
	etcdCA pki.KeyPair
	// saVerify holds the key(s) that verify service-account tokens, saSign the signing key.
	saVerify, saSign []byte
}

// readPKI reads the PKI of a control-plane node from its files, in the layout of its
// distribution, and checks every certificate against its key.
func readPKI(p *plan) (*clusterPKI, error) {
	read := func(path string) ([]byte, error) {
		b, err := p.file(path)
		if err != nil {
			return nil, refuse(ReasonBootstrapDataRefused, "control-plane PKI: %v", err)
		}
		return b, nil
	}
	pair := func(cert, key string) (pki.KeyPair, error) {
		c, err := read(cert)
		if err != nil {
			return pki.KeyPair{}, err
		}
		k, err := read(key)
		if err != nil {
			return pki.KeyPair{}, err
		}
		kp := pki.KeyPair{Cert: c, Key: k}
		if _, _, err := pki.ParseKeyPair(kp); err != nil {
			return pki.KeyPair{}, refuse(ReasonBootstrapDataRefused, "%s and %s: %v", cert, key, err)
		}
		return kp, nil
	}
	out := &clusterPKI{}
	var err error
	if p.distribution == render.K0s {
		d := k0sPKIDir
		if out.clientCA, err = pair(d+"/ca.crt", d+"/ca.key"); err != nil {
			return nil, err
		}
		out.serverCA = out.clientCA
		if out.frontProxyCA, err = pair(d+"/front-proxy-ca.crt", d+"/front-proxy-ca.key"); err != nil {
			return nil, err
		}
		if out.etcdCA, err = pair(d+"/etcd/ca.crt", d+"/etcd/ca.key"); err != nil {
			return nil, err
		}
		if out.saVerify, err = read(d + "/sa.pub"); err != nil {
			return nil, err
		}
		if out.saSign, err = read(d + "/sa.key"); err != nil {
			return nil, err
		}
		if _, _, err := pki.ParseServiceAccountKeyPair(pki.KeyPair{Cert: out.saVerify, Key: out.saSign}); err != nil {
			return nil, refuse(ReasonBootstrapDataRefused, "%s/sa.pub and sa.key: %v", d, err)
		}
		return out, nil
	}
	d := k3sTLSDir
	if out.serverCA, err = pair(d+"/server-ca.crt", d+"/server-ca.key"); err != nil {
		return nil, err
	}
	if out.clientCA, err = pair(d+"/client-ca.crt", d+"/client-ca.key"); err != nil {
		return nil, err
	}
	if out.frontProxyCA, err = pair(d+"/request-header-ca.crt", d+"/request-header-ca.key"); err != nil {
		return nil, err
	}
	if out.etcdCA, err = pair(d+"/etcd/server-ca.crt", d+"/etcd/server-ca.key"); err != nil {
		return nil, err
	}
	if _, err = pair(d+"/etcd/peer-ca.crt", d+"/etcd/peer-ca.key"); err != nil {
		return nil, err
	}
	if out.saVerify, err = read(d + "/service.key"); err != nil {
		return nil, err
	}
	if out.saSign, err = read(d + "/service.current.key"); err != nil {
		return nil, err
	}
	for _, k := range [][]byte{out.saVerify, out.saSign} {
		if _, err := pki.ParsePrivateKey(k); err != nil {
			return nil, refuse(ReasonBootstrapDataRefused, "k3s service-account key: %v", err)
		}
	}
	return out, nil
}

// joinerCA returns the CA certificate a joining node of the distribution must share with
// the cluster (k0s ca.crt, k3s server-ca.crt), or nil when its document writes none.
func joinerCA(p *plan) []byte {
	if p.distribution == render.K0s {
		return []byte(p.files[k0sPKIDir+"/ca.crt"])
	}
	return []byte(p.files[k3sTLSDir+"/server-ca.crt"])
}

// signCSR signs a certificate request with a CA as a client certificate.
func signCSR(ca pki.KeyPair, req *x509.CertificateRequest, validity time.Duration) ([]byte, error) {
	caCert, caKey, err := pki.ParseKeyPair(ca)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.Subject.CommonName, Organization: req.Subject.Organization},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, req.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newKubeletCSR creates a key and a certificate request for a kubelet client certificate.
func newKubeletCSR(nodeName string) (csrPEM, keyPEM []byte, err error) {
	kp, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, kp)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(kp)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// newClientCert creates a client certificate of the CA for a new key. The key is ECDSA P-256, as
// the key a kubelet generates for its own client certificate (newKubeletCSR does the same); the
// RSA key that common/pki's SignClient generates took 6 % of the lifecycle test binary's CPU for
// these certificates alone (pprof of TestRollout, 2026-11-28). The certificate is the same
// otherwise: the cluster's client CA, system:node:<name> in system:nodes, client auth only.
func newClientCert(ca pki.KeyPair, cn string, orgs []string, validity time.Duration) (*pki.KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	certPEM, err := signCSR(ca, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: orgs}, PublicKey: key.Public(),
	}, validity)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &pki.KeyPair{Cert: certPEM, Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}, nil
}

func newKey() (crypto.Signer, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// sameCertificates compares two PEM bundles by their certificates, ignoring formatting.
func sameCertificates(a, b []byte) bool {
	ca, err1 := pki.ParseCertificates(a)
	cb, err2 := pki.ParseCertificates(b)
	if err1 != nil || err2 != nil || len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i].Raw, cb[i].Raw) {
			return false
		}
	}
	return true
}

// describeCA names a CA for messages.
func describeCA(certPEM []byte) string {
	c, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return "an unreadable certificate"
	}
	return fmt.Sprintf("CA %q (serial %x)", c.Subject.CommonName, c.SerialNumber)
}

// parseCSR decodes a PEM certificate request and checks its signature.
func parseCSR(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	return req, req.CheckSignature()
}
