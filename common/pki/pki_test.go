package pki

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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

// kubeconfigFile is decoded with local structs, independent of the package's
// own types.
type kubeconfigFile struct {
	APIVersion     string `yaml:"apiVersion"`
	Kind           string `yaml:"kind"`
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server string `yaml:"server"`
			CAData string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster string `yaml:"cluster"`
			User    string `yaml:"user"`
		} `yaml:"context"`
	} `yaml:"contexts"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			CertData string `yaml:"client-certificate-data"`
			KeyData  string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

func TestKubeconfig(t *testing.T) {
	authority := ca(t)
	client, err := authority.SignClient("demo-admin", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Kubeconfig("demo", "https://api.demo.example.com:6443", authority.Cert, "demo-admin", client)
	if err != nil {
		t.Fatal(err)
	}
	var kc kubeconfigFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&kc); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if kc.APIVersion != "v1" || kc.Kind != "Config" || kc.CurrentContext != "demo-admin@demo" {
		t.Fatalf("header %+v", kc)
	}
	if len(kc.Clusters) != 1 || kc.Clusters[0].Name != "demo" || kc.Clusters[0].Cluster.Server != "https://api.demo.example.com:6443" {
		t.Fatalf("clusters %+v", kc.Clusters)
	}
	caData, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CAData)
	if err != nil || !bytes.Equal(caData, authority.Cert) {
		t.Fatalf("kubeconfig does not carry the CA: %v", err)
	}
	if len(kc.Contexts) != 1 || kc.Contexts[0].Name != "demo-admin@demo" || kc.Contexts[0].Context.Cluster != "demo" || kc.Contexts[0].Context.User != "demo-admin" {
		t.Fatalf("contexts %+v", kc.Contexts)
	}
	if len(kc.Users) != 1 || kc.Users[0].Name != "demo-admin" {
		t.Fatalf("users %+v", kc.Users)
	}
	certPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.CertData)
	keyPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.KeyData)
	if _, _, err := ParseKeyPair(KeyPair{Cert: certPEM, Key: keyPEM}); err != nil {
		t.Fatalf("client credentials: %v", err)
	}
	for _, bad := range []func() ([]byte, error){
		func() ([]byte, error) { return Kubeconfig("", "https://x", authority.Cert, "u", client) },
		func() ([]byte, error) { return Kubeconfig("c", "", authority.Cert, "u", client) },
		func() ([]byte, error) { return Kubeconfig("c", "https://x", []byte("nope"), "u", client) },
		func() ([]byte, error) { return Kubeconfig("c", "https://x", authority.Cert, "", client) },
		func() ([]byte, error) { return Kubeconfig("c", "https://x", authority.Cert, "u", nil) },
	} {
		if _, err := bad(); err == nil {
			t.Error("invalid kubeconfig input accepted")
		}
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
