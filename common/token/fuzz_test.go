package token

import (
	"testing"
	"time"
)

// FuzzParseTokens feeds arbitrary strings to every token parser: none may panic, and what a
// parser accepts must survive a round trip through its encoder.
func FuzzParseTokens(f *testing.F) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAL\n-----END CERTIFICATE-----\n")
	bt := BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	if tok, err := NewK0sJoinToken(K0sWorkerToken, "https://10.0.0.1:6443", ca, bt); err == nil {
		f.Add(tok)
	}
	if tok, err := NewK0sJoinToken(K0sControllerToken, "https://10.0.0.1:9443", ca, bt); err == nil {
		f.Add(tok)
	}
	if tok, err := FormatK3sToken("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "server", "password"); err == nil {
		f.Add(tok)
	}
	for _, s := range []string{"abcdef.0123456789abcdef", "K10::server:pw", "K10abc::server:", "plainpassword", "", "H4sIAAAAAAAA/w==", "a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if bt, err := ParseBootstrapToken(s); err == nil {
			if again, err := ParseBootstrapToken(bt.String()); err != nil || again != bt {
				t.Fatalf("bootstrap token %q does not round-trip: %+v %v", s, again, err)
			}
		}
		if hash, user, pw, err := ParseK3sToken(s); err == nil && hash != "" {
			tok, err := FormatK3sToken(hash, user, pw)
			if err != nil {
				t.Fatalf("k3s token %q parsed to (%q, %q, %q) but does not format: %v", s, hash, user, pw, err)
			}
			h2, u2, p2, err := ParseK3sToken(tok)
			if err != nil || h2 != hash || u2 != user || p2 != pw {
				t.Fatalf("k3s token %q does not round-trip: %q -> (%q %q %q) %v", s, tok, h2, u2, p2, err)
			}
		}
		if info, err := ParseK0sJoinToken(s); err == nil {
			if info.Token.ID == "" || info.Server == "" {
				t.Fatalf("k0s join token %q parsed to %+v", s, info)
			}
		}
		_, _ = DecodeK0sJoinToken(s)
		_, _ = K0sBootstrapTokenSecretData(K0sWorkerToken, bt, time.Unix(0, 0))
	})
}
