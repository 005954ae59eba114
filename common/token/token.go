package token

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
)

const (
	bootstrapTokenIDLen     = 6
	bootstrapTokenSecretLen = 16
	bootstrapTokenAlphabet  = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// BootstrapTokenPattern matches a Kubernetes bootstrap token "<id>.<secret>".
var BootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// BootstrapToken is a Kubernetes bootstrap token.
type BootstrapToken struct {
	// ID is public: it names the Secret bootstrap-token-<ID>.
	ID string
	// Secret authenticates.
	Secret string
}

// NewBootstrapToken returns a random bootstrap token.
func NewBootstrapToken() (BootstrapToken, error) {
	id, err := randomString(bootstrapTokenIDLen)
	if err != nil {
		return BootstrapToken{}, err
	}
	secret, err := randomString(bootstrapTokenSecretLen)
	if err != nil {
		return BootstrapToken{}, err
	}
	return BootstrapToken{ID: id, Secret: secret}, nil
}

// ParseBootstrapToken parses "<id>.<secret>".
func ParseBootstrapToken(s string) (BootstrapToken, error) {
	m := BootstrapTokenPattern.FindStringSubmatch(s)
	if m == nil {
		return BootstrapToken{}, fmt.Errorf("token: %q is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})", redact(s))
	}
	return BootstrapToken{ID: m[1], Secret: m[2]}, nil
}

// String returns "<id>.<secret>".
func (t BootstrapToken) String() string { return t.ID + "." + t.Secret }

// SecretName is the name of the kube-system Secret that backs the token.
func (t BootstrapToken) SecretName() string { return "bootstrap-token-" + t.ID }

// Validate checks the token's format.
func (t BootstrapToken) Validate() error {
	_, err := ParseBootstrapToken(t.String())
	return err
}

// randomString draws n characters uniformly from bootstrapTokenAlphabet.
func randomString(n int) (string, error) {
	max := big.NewInt(int64(len(bootstrapTokenAlphabet)))
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("token: reading random bytes: %w", err)
		}
		b[i] = bootstrapTokenAlphabet[v.Int64()]
	}
	return string(b), nil
}

// redact keeps error messages from echoing secrets.
func redact(s string) string {
	if len(s) <= 7 {
		return "<redacted>"
	}
	return s[:7] + "<redacted>"
}
