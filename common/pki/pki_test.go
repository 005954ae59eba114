package pki

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

var (
	caOnce sync.Once
	testCA *KeyPair
	caErr  error
)

func ca(t *testing.T) *KeyPair {
	t.Helper()
	caOnce.Do(func() { testCA, caErr = NewCA("kubernetes", 24*time.Hour) })
	if caErr != nil {
		t.Fatal(caErr)
	}
	return testCA
}

func TestNewCA(t *testing.T) {
	kp := ca(t)
	cert, key, err := ParseKeyPair(*kp)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.Subject.CommonName != "kubernetes" {
		t.Fatalf("not a CA: %+v", cert)
	}
	if cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatal("CA cannot sign certificates")
	}
	if rk, ok := key.(*rsa.PrivateKey); !ok || rk.N.BitLen() != 2048 {
		t.Fatalf("want an RSA 2048 key, got %T", key)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}
	if d := time.Until(cert.NotAfter); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("validity %s", d)
	}
	if !time.Now().After(cert.NotBefore) {
		t.Fatal("CA not valid yet")
	}
	if !bytes.HasPrefix(kp.Key, []byte("-----BEGIN RSA PRIVATE KEY-----")) {
		t.Fatalf("key PEM type: %s", kp.Key[:40])
	}
	if _, err := NewCA("", time.Hour); err == nil {
		t.Fatal("empty common name accepted")
	}
	if _, err := NewCA("x", 0); err == nil {
		t.Fatal("zero validity accepted")
	}
}

func TestSignClientVerifiesAgainstCA(t *testing.T) {
	authority := ca(t)
	client, err := authority.SignClient("kubernetes-admin", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ParseKeyPair(*client)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := ParseCertificate(authority.Cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not verify against the CA: %v", err)
	}
	if cert.IsCA || cert.Subject.CommonName != "kubernetes-admin" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Fatalf("subject %+v", cert.Subject)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("client certificate is valid for serving")
	}
	// Another CA does not validate it.
	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, _ := ParseCertificate(other.Cert)
	pool := x509.NewCertPool()
	pool.AddCert(otherCert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("verified against an unrelated CA")
	}
}

func TestSignServer(t *testing.T) {
	authority := ca(t)
	srv, err := authority.SignServer("apiserver", []string{"api.example.com", "10.0.0.1", "::1", ""}, 100*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ParseKeyPair(*srv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cert.DNSNames, []string{"api.example.com"}) || len(cert.IPAddresses) != 2 || !cert.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Fatalf("SANs %v %v", cert.DNSNames, cert.IPAddresses)
	}
	caCert, _ := ParseCertificate(authority.Cert)
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"}); err != nil {
		t.Fatal(err)
	}
	// Capped at the CA's expiry.
	if !cert.NotAfter.Equal(caCert.NotAfter) {
		t.Fatalf("leaf outlives the CA: %s > %s", cert.NotAfter, caCert.NotAfter)
	}
	leaf := KeyPair(*srv)
	if _, err := leaf.SignClient("x", nil, time.Hour); err == nil {
		t.Fatal("a leaf certificate signed another certificate")
	}
}

func TestServiceAccountKeyPair(t *testing.T) {
	sa, err := NewServiceAccountKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sa.Cert, []byte("-----BEGIN PUBLIC KEY-----")) {
		t.Fatalf("Cert is not a PEM public key: %s", sa.Cert)
	}
	pub, key, err := ParseServiceAccountKeyPair(*sa)
	if err != nil {
		t.Fatal(err)
	}
	// The halves match: a signature verifies with the public key.
	digest := sha256.Sum256([]byte("token"))
	sig, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if err := rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), crypto.SHA256, digest[:], sig); err != nil {
		t.Fatal(err)
	}
	other, err := NewServiceAccountKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ParseServiceAccountKeyPair(KeyPair{Cert: sa.Cert, Key: other.Key}); err == nil {
		t.Fatal("mismatched service-account halves accepted")
	}
}

func TestParseKeyPairMismatch(t *testing.T) {
	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ParseKeyPair(KeyPair{Cert: ca(t).Cert, Key: other.Key}); err == nil {
		t.Fatal("mismatched key accepted")
	}
	if _, _, err := ParseKeyPair(KeyPair{Cert: []byte("junk"), Key: other.Key}); err == nil {
		t.Fatal("junk certificate accepted")
	}
	if _, err := ParsePrivateKey([]byte("junk")); err == nil {
		t.Fatal("junk key accepted")
	}
}

func TestCertificateNotAfter(t *testing.T) {
	authority := ca(t)
	c, _ := ParseCertificate(authority.Cert)
	got, err := CertificateNotAfter(authority.Cert)
	if err != nil || !got.Equal(c.NotAfter) {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := CertificateNotAfter([]byte("no pem")); err == nil {
		t.Fatal("junk accepted")
	}
	// A bundle: the first certificate counts.
	other, _ := NewCA("other", 48*time.Hour)
	bundle := append(append([]byte{}, authority.Cert...), other.Cert...)
	got, _ = CertificateNotAfter(bundle)
	if !got.Equal(c.NotAfter) {
		t.Fatal("not the first certificate of the bundle")
	}
	certs, err := ParseCertificates(bundle)
	if err != nil || len(certs) != 2 {
		t.Fatalf("ParseCertificates: %d %v", len(certs), err)
	}
}
