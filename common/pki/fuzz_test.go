package pki

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary PEM to the parsers that read certificates and keys from Secrets and
// kubeconfigs: none may panic, and a key pair they accept must really pair.
func FuzzParse(f *testing.F) {
	// The renderer's fixture PKI: generating keys here would make every fuzz worker spend its
	// time in instrumented RSA key generation.
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join("..", "render", "testdata", "pki", name))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	f.Add(read("ca.crt"), read("ca.key"))
	f.Add(read("sa.crt"), read("sa.key"))
	f.Add(read("ca.crt"), read("sa.key"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		_, _ = ParseCertificates(certPEM)
		_, _ = CertificateNotAfter(certPEM)
		_, _ = ParsePublicKey(certPEM)
		_, _, _ = ParseServiceAccountKeyPair(KeyPair{Cert: certPEM, Key: keyPEM})
		cert, key, err := ParseKeyPair(KeyPair{Cert: certPEM, Key: keyPEM})
		if err != nil {
			return
		}
		if !keysMatch(cert.PublicKey, key) {
			t.Fatal("ParseKeyPair accepted a certificate and a key that do not pair")
		}
	})
}
