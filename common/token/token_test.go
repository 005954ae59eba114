package token

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

var (
	caOnce sync.Once
	testCA *pki.KeyPair
)

func ca(t *testing.T) *pki.KeyPair {
	t.Helper()
	caOnce.Do(func() {
		var err error
		if testCA, err = pki.NewCA("kubernetes", time.Hour); err != nil {
			panic(err)
		}
	})
	return testCA
}

func TestBootstrapToken(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		tok, err := NewBootstrapToken()
		if err != nil {
			t.Fatal(err)
		}
		s := tok.String()
		if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(s) {
			t.Fatalf("bad format %q", s)
		}
		if seen[s] {
			t.Fatalf("duplicate token %q", s)
		}
		seen[s] = true
		back, err := ParseBootstrapToken(s)
		if err != nil || back != tok {
			t.Fatalf("round trip %q: %v %v", s, back, err)
		}
		if tok.SecretName() != "bootstrap-token-"+tok.ID {
			t.Fatal(tok.SecretName())
		}
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcdeF", "abcdef:0123456789abcdef", " abcdef.0123456789abcdef"} {
		_, err := ParseBootstrapToken(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if len(bad) > 10 && strings.Contains(err.Error(), bad[8:]) {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
}

// joinKubeconfig is decoded with local structs.
type joinKubeconfig struct {
	Clusters []struct {
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
	CurrentContext string `yaml:"current-context"`
	Users          []struct {
		Name string `yaml:"name"`
		User struct {
			Token string `yaml:"token"`
		} `yaml:"user"`
	} `yaml:"users"`
}

func TestK0sJoinToken(t *testing.T) {
	tok := BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	for _, tc := range []struct {
		role       K0sTokenRole
		wantURL    string
		wantUser   string
		wantPrefix string
	}{
		{K0sWorkerToken, "https://api.example.com:6443", "kubelet-bootstrap", ""},
		{K0sControllerToken, "https://api.example.com:9443", "controller-bootstrap", ""},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			url, err := K0sJoinURL(tc.role, "api.example.com", 6443)
			if err != nil || url != tc.wantURL {
				t.Fatalf("url %q %v", url, err)
			}
			kc, err := K0sJoinKubeconfig(tc.role, url, ca(t).Cert, tok)
			if err != nil {
				t.Fatal(err)
			}
			var got joinKubeconfig
			if err := yaml.Unmarshal(kc, &got); err != nil {
				t.Fatal(err)
			}
			if got.CurrentContext != "k0s" || len(got.Contexts) != 1 || got.Contexts[0].Name != "k0s" || got.Contexts[0].Context.Cluster != "k0s" || got.Contexts[0].Context.User != tc.wantUser {
				t.Fatalf("contexts %+v", got)
			}
			if len(got.Clusters) != 1 || got.Clusters[0].Name != "k0s" || got.Clusters[0].Cluster.Server != tc.wantURL {
				t.Fatalf("clusters %+v", got.Clusters)
			}
			caData, _ := base64.StdEncoding.DecodeString(got.Clusters[0].Cluster.CAData)
			if !bytes.Equal(caData, ca(t).Cert) {
				t.Fatal("CA not embedded")
			}
			if len(got.Users) != 1 || got.Users[0].Name != tc.wantUser || got.Users[0].User.Token != "abcdef.0123456789abcdef" {
				t.Fatalf("users %+v", got.Users)
			}

			enc, err := EncodeK0sJoinToken(kc)
			if err != nil {
				t.Fatal(err)
			}
			// Exactly what k0s produces: gzip at best compression, standard
			// base64 with padding.
			var want bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&want, gzip.BestCompression)
			zw.Write(kc)
			zw.Close()
			if enc != base64.StdEncoding.EncodeToString(want.Bytes()) {
				t.Fatal("encoding differs from gzip(best)+base64")
			}
			dec, err := DecodeK0sJoinToken(enc)
			if err != nil || !bytes.Equal(dec, kc) {
				t.Fatalf("round trip: %v", err)
			}
			if dec2, err := DecodeK0sJoinToken(enc + "\n"); err != nil || !bytes.Equal(dec2, kc) {
				t.Fatalf("trailing newline: %v", err)
			}
			info, err := ParseK0sJoinToken(enc)
			if err != nil {
				t.Fatal(err)
			}
			if info.Role != tc.role || info.Server != tc.wantURL || info.Token != tok || !bytes.Equal(info.CACert, ca(t).Cert) {
				t.Fatalf("info %+v", info)
			}
			direct, err := NewK0sJoinToken(tc.role, url, ca(t).Cert, tok)
			if err != nil || direct != enc {
				t.Fatalf("NewK0sJoinToken differs: %v", err)
			}
		})
	}
	if _, err := K0sJoinKubeconfig("admin", "https://x:6443", ca(t).Cert, tok); err == nil {
		t.Error("unknown role accepted")
	}
	if _, err := K0sJoinKubeconfig(K0sWorkerToken, "http://x:6443", ca(t).Cert, tok); err == nil {
		t.Error("http URL accepted")
	}
	if _, err := K0sJoinKubeconfig(K0sWorkerToken, "https://x:6443", []byte("x"), tok); err == nil {
		t.Error("non-PEM CA accepted")
	}
	if _, err := K0sJoinKubeconfig(K0sWorkerToken, "https://x:6443", ca(t).Cert, BootstrapToken{ID: "x"}); err == nil {
		t.Error("invalid bootstrap token accepted")
	}
	if _, err := DecodeK0sJoinToken("not base64!"); err == nil {
		t.Error("junk decoded")
	}
	if _, err := DecodeK0sJoinToken(base64.StdEncoding.EncodeToString([]byte("not gzip"))); err == nil {
		t.Error("non-gzip decoded")
	}
	if u, err := K0sJoinURL(K0sWorkerToken, "fd00::1", 6443); err != nil || u != "https://[fd00::1]:6443" {
		t.Errorf("IPv6 URL %q %v", u, err)
	}
}

func TestK0sBootstrapTokenSecret(t *testing.T) {
	tok := BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	data, err := K0sBootstrapTokenSecretData(K0sWorkerToken, tok, exp)
	if err != nil {
		t.Fatal(err)
	}
	if data["token-id"] != "abcdef" || data["token-secret"] != "0123456789abcdef" || data["usage-bootstrap-authentication"] != "true" || data["expiration"] != "2030-01-02T02:04:05Z" {
		t.Fatalf("worker data %v", data)
	}
	if _, ok := data["usage-bootstrap-controller-join"]; ok {
		t.Fatal("worker token usable for controller joins")
	}
	data, err = K0sBootstrapTokenSecretData(K0sControllerToken, tok, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if data["usage-bootstrap-controller-join"] != "true" || data["usage-controller-join"] != "true" {
		t.Fatalf("controller data %v", data)
	}
	if _, ok := data["usage-bootstrap-authentication"]; ok {
		t.Fatal("controller token authenticates to the API server")
	}
	if _, ok := data["expiration"]; ok {
		t.Fatal("zero expiry rendered")
	}

	m, err := K0sBootstrapTokenManifest(K0sWorkerToken, tok, exp)
	if err != nil {
		t.Fatal(err)
	}
	var secret struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Type       string            `yaml:"type"`
		Metadata   map[string]string `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(m, &secret); err != nil {
		t.Fatal(err)
	}
	if secret.APIVersion != "v1" || secret.Kind != "Secret" || secret.Type != "bootstrap.kubernetes.io/token" || secret.Metadata["name"] != "bootstrap-token-abcdef" || secret.Metadata["namespace"] != "kube-system" {
		t.Fatalf("manifest %+v", secret)
	}
	id, _ := base64.StdEncoding.DecodeString(secret.Data["token-id"])
	if string(id) != "abcdef" {
		t.Fatalf("token-id %q", id)
	}
}

func TestK3sToken(t *testing.T) {
	caPEM := ca(t).Cert
	tok, err := NewK3sToken(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^K10[0-9a-f]{64}::server:[0-9a-f]{32}$`).MatchString(tok) {
		t.Fatalf("bad format %q", tok)
	}
	sum := sha256.Sum256(caPEM)
	hash, user, pass, err := ParseK3sToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if hash != hex.EncodeToString(sum[:]) {
		t.Fatal("hash is not the SHA-256 of the CA bytes")
	}
	if user != "server" || len(pass) != 32 {
		t.Fatalf("user %q pass %q", user, pass)
	}
	again, _ := NewK3sToken(caPEM)
	if again == tok {
		t.Fatal("tokens are not random")
	}
	formatted, err := FormatK3sToken(hash, user, pass)
	if err != nil || formatted != tok {
		t.Fatalf("FormatK3sToken: %q %v", formatted, err)
	}
	// Literal bytes: a different spelling of the same certificate hashes
	// differently, as on the node.
	h2, _ := K3sCAHash(append(append([]byte{}, caPEM...), '\n'))
	if h2 == hash {
		t.Fatal("hash ignores the exact bytes")
	}

	for _, bad := range []string{
		"", "K10", "secret", "K10abc::server:x",
		"K10" + strings.Repeat("A", 64) + "::server:x",
		"K10" + strings.Repeat("a", 64) + ":server:x",
		"K10" + strings.Repeat("a", 64) + "::serverx",
		"K10" + strings.Repeat("a", 64) + "::server:",
		"K10" + strings.Repeat("a", 64) + "::server:x y",
	} {
		if _, _, _, err := ParseK3sToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range [][3]string{{"xyz", "server", "p"}, {strings.Repeat("a", 64), "", "p"}, {strings.Repeat("a", 64), "a:b", "p"}, {strings.Repeat("a", 64), "server", ""}} {
		if _, err := FormatK3sToken(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if _, err := NewK3sToken([]byte("not a certificate")); err == nil {
		t.Error("junk CA accepted")
	}
}

// TestK3sCAHashChain: for a bundle k3s hashes the DER of the root the first
// certificate chains to.
func TestK3sCAHashChain(t *testing.T) {
	rootKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	interKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	now := time.Now()
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	interTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "intermediate"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: interDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER})...)
	got, err := K3sCAHash(bundle)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(rootDER)
	if got != hex.EncodeToString(sum[:]) {
		t.Fatal("chain hash is not the SHA-256 of the root DER")
	}
}
