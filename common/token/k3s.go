package token

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

const (
	// K3sTokenPrefix starts every secure-format k3s token.
	K3sTokenPrefix = "K10"
	// K3sServerUser is the user of server (cluster) tokens.
	K3sServerUser = "server"
	// K3sAgentUser is the user of agent tokens. A k3s server given
	// --agent-token-file with a secure-format token keeps only the password
	// after "::node:" for this user (k3s pkg/passwd/passwd.go EnsureUser,
	// called from pkg/daemons/control/deps/deps.go genUsers), and agents
	// authenticate as "node" (pkg/agent/run.go,
	// clientaccess.NormalizeAndValidateTokenForUser(..., "node")). The "node"
	// user may join agents only: servers join with the "server" user.
	K3sAgentUser = "node"

	k3sPasswordBytes = 16
)

var k3sHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// K3sCAHash computes the CA hash k3s puts in secure tokens for a CA bundle, the
// exact bytes k3s serves at /cacerts (server-ca.crt): the SHA-256 of the bytes
// themselves when the bundle holds one certificate; when it holds a chain,
// the SHA-256 of the DER of the root its first certificate chains to.
func K3sCAHash(caBundle []byte) (string, error) {
	var certs []*x509.Certificate
	for rest := caBundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("token: parsing k3s CA bundle: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return "", errors.New("token: k3s CA bundle holds no PEM certificate")
	}
	hashed := caBundle
	if len(certs) > 1 {
		roots, inter := x509.NewCertPool(), x509.NewCertPool()
		for _, c := range certs[1:] {
			if len(c.AuthorityKeyId) == 0 || bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId) {
				roots.AddCert(c)
			} else {
				inter.AddCert(c)
			}
		}
		if chains, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err == nil {
			chain := chains[0]
			hashed = chain[len(chain)-1].Raw
		}
	}
	sum := sha256.Sum256(hashed)
	return hex.EncodeToString(sum[:]), nil
}

// NewK3sToken returns a random secure-format server token pinned to the CA
// bundle: K10<hash>::server:<32 hex characters>.
func NewK3sToken(caCert []byte) (string, error) {
	hash, err := K3sCAHash(caCert)
	if err != nil {
		return "", err
	}
	b := make([]byte, k3sPasswordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: reading random bytes: %w", err)
	}
	return FormatK3sToken(hash, K3sServerUser, hex.EncodeToString(b))
}

// NewK3sAgentToken returns a random secure-format agent token pinned to the
// CA bundle: K10<hash>::node:<32 hex characters>. Servers accept it from
// agents when it is given to them with --agent-token-file; it cannot join a
// server.
func NewK3sAgentToken(caCert []byte) (string, error) {
	hash, err := K3sCAHash(caCert)
	if err != nil {
		return "", err
	}
	b := make([]byte, k3sPasswordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: reading random bytes: %w", err)
	}
	return FormatK3sToken(hash, K3sAgentUser, hex.EncodeToString(b))
}

// FormatK3sToken assembles a secure-format token from its parts.
func FormatK3sToken(caHash, username, password string) (string, error) {
	switch {
	case !k3sHashPattern.MatchString(caHash):
		return "", fmt.Errorf("token: k3s CA hash must be 64 lowercase hex characters, got %q", caHash)
	case username == "" || strings.ContainsAny(username, ": \t\r\n"):
		return "", fmt.Errorf("token: invalid k3s token user %q", username)
	case password == "" || strings.ContainsAny(password, " \t\r\n"):
		return "", errors.New("token: invalid k3s token password")
	}
	return K3sTokenPrefix + caHash + "::" + username + ":" + password, nil
}

// ParseK3sToken splits a secure-format token K10<hash>::<user>:<password>.
func ParseK3sToken(s string) (caHash, username, password string, err error) {
	rest, ok := strings.CutPrefix(s, K3sTokenPrefix)
	if !ok {
		return "", "", "", fmt.Errorf("token: k3s token %q is not in the secure format (K10<ca hash>::<user>:<password>)", redact(s))
	}
	caHash, creds, ok := strings.Cut(rest, "::")
	if !ok {
		return "", "", "", errors.New("token: k3s token has no \"::\" after the CA hash")
	}
	if !k3sHashPattern.MatchString(caHash) {
		return "", "", "", errors.New("token: k3s token CA hash is not 64 lowercase hex characters")
	}
	username, password, ok = strings.Cut(creds, ":")
	if !ok || username == "" || password == "" {
		return "", "", "", errors.New("token: k3s token credentials are not <user>:<password>")
	}
	if strings.ContainsAny(creds, " \t\r\n") {
		return "", "", "", errors.New("token: k3s token contains whitespace")
	}
	return caHash, username, password, nil
}
