package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// PEM block types.
const (
	CertificateBlockType   = "CERTIFICATE"
	RSAPrivateKeyBlockType = "RSA PRIVATE KEY"
	PublicKeyBlockType     = "PUBLIC KEY"
)

// Default validities.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// rsaKeyBits is 2048: accepted everywhere (see the package doc) and fast
// enough to generate on every client-certificate rotation.
const rsaKeyBits = 2048

// clockSkew backdates NotBefore so that a node whose clock is slightly behind
// the management cluster accepts fresh certificates.
const clockSkew = 5 * time.Minute

// KeyPair is a PEM certificate (or, for service-account keys, a PEM public
// key) and its PEM private key.
type KeyPair struct {
	Cert []byte
	Key  []byte
}

func newKey() (*rsa.PrivateKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, rsaKeyBits)
	if err != nil {
		return nil, fmt.Errorf("generating RSA key: %w", err)
	}
	return k, nil
}

func newSerial() (*big.Int, error) {
	// 128 random bits, positive.
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	s, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func encodeKey(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: RSAPrivateKeyBlockType, Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: CertificateBlockType, Bytes: der})
}

// NewCA creates a self-signed certificate authority.
func NewCA(commonName string, validity time.Duration) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("pki: CA common name is empty")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("pki: CA validity must be positive, got %s", validity)
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: creating CA certificate: %w", err)
	}
	return &KeyPair{Cert: encodeCert(der), Key: encodeKey(key)}, nil
}

// NewServiceAccountKeyPair creates the key pair the API server signs
// service-account tokens with. Cert holds the PEM public key (sa.pub), Key
// the PEM private key (sa.key).
func NewServiceAccountKeyPair() (*KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("pki: encoding public key: %w", err)
	}
	return &KeyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: PublicKeyBlockType, Bytes: pub}),
		Key:  encodeKey(key),
	}, nil
}

// SignClient issues a client certificate (e.g. for a kubeconfig user; the
// organizations become Kubernetes groups).
func (ca *KeyPair) SignClient(commonName string, organizations []string, validity time.Duration) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("pki: client common name is empty")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: organizations},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.sign(tmpl, validity)
}

// SignServer issues a serving certificate. Each SAN is an IP address or a DNS
// name.
func (ca *KeyPair) SignServer(commonName string, sans []string, validity time.Duration) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("pki: server common name is empty")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if san != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	return ca.sign(tmpl, validity)
}

// sign completes tmpl and signs it with the CA. The certificate never
// outlives the CA.
func (ca *KeyPair) sign(tmpl *x509.Certificate, validity time.Duration) (*KeyPair, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("pki: certificate validity must be positive, got %s", validity)
	}
	caCert, caKey, err := ParseKeyPair(*ca)
	if err != nil {
		return nil, fmt.Errorf("pki: reading CA: %w", err)
	}
	if !caCert.IsCA {
		return nil, errors.New("pki: signing certificate is not a CA")
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: signing certificate: %w", err)
	}
	return &KeyPair{Cert: encodeCert(der), Key: encodeKey(key)}, nil
}

// ParseCertificate decodes the first certificate of a PEM bundle.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("pki: no PEM certificate found")
		}
		if block.Type == CertificateBlockType {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parsing certificate: %w", err)
			}
			return c, nil
		}
	}
}

// ParseCertificates decodes every certificate of a PEM bundle.
func ParseCertificates(bundle []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != CertificateBlockType {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: parsing certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("pki: no PEM certificate found")
	}
	return certs, nil
}

// ParsePrivateKey decodes a PEM private key (PKCS#1, PKCS#8 or SEC 1).
func ParsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("pki: no PEM private key found")
		}
		switch block.Type {
		case RSAPrivateKeyBlockType:
			k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parsing RSA private key: %w", err)
			}
			return k, nil
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parsing EC private key: %w", err)
			}
			return k, nil
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parsing PKCS#8 private key: %w", err)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("pki: unsupported private key type %T", k)
			}
			return s, nil
		}
	}
}

// ParsePublicKey decodes a PEM public key (PKIX).
func ParsePublicKey(pubPEM []byte) (crypto.PublicKey, error) {
	for rest := pubPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("pki: no PEM public key found")
		}
		if block.Type == PublicKeyBlockType {
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parsing public key: %w", err)
			}
			return k, nil
		}
	}
}

type publicKeyEqualer interface {
	Equal(crypto.PublicKey) bool
}

func keysMatch(pub crypto.PublicKey, key crypto.Signer) bool {
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
	default:
		return false
	}
	e, ok := pub.(publicKeyEqualer)
	return ok && e.Equal(key.Public())
}

// ParseKeyPair decodes a certificate key pair and checks that the key belongs
// to the certificate.
func ParseKeyPair(kp KeyPair) (*x509.Certificate, crypto.Signer, error) {
	cert, err := ParseCertificate(kp.Cert)
	if err != nil {
		return nil, nil, err
	}
	key, err := ParsePrivateKey(kp.Key)
	if err != nil {
		return nil, nil, err
	}
	if !keysMatch(cert.PublicKey, key) {
		return nil, nil, errors.New("pki: private key does not match the certificate")
	}
	return cert, key, nil
}

// ParseServiceAccountKeyPair decodes a service-account key pair (Cert holds
// the public key) and checks that the two halves match.
func ParseServiceAccountKeyPair(kp KeyPair) (crypto.PublicKey, crypto.Signer, error) {
	pub, err := ParsePublicKey(kp.Cert)
	if err != nil {
		return nil, nil, err
	}
	key, err := ParsePrivateKey(kp.Key)
	if err != nil {
		return nil, nil, err
	}
	if !keysMatch(pub, key) {
		return nil, nil, errors.New("pki: service-account private key does not match the public key")
	}
	return pub, key, nil
}

// CertificateNotAfter returns the expiry of the first certificate in certPEM.
func CertificateNotAfter(certPEM []byte) (time.Time, error) {
	c, err := ParseCertificate(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}
