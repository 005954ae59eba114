package render

import (
	"regexp"
	"strings"
	"testing"
)

func TestHandWrittenValidators(t *testing.T) {
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	for _, s := range []string{"", "a", "a.b", "a-b.c-d", "-a", "a-", "a.-b", "a-.b", "a..b", ".a", "a.", "A", "a_b", "1.2.3.4", "xn--d1a", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 127) + "a"} {
		want := dns.MatchString(s) && len(s) <= 253
		for _, label := range strings.Split(s, ".") {
			if len(label) > 63 {
				want = false
			}
		}
		if got := isDNSName(s); got != want {
			t.Errorf("isDNSName(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestVersionGrammar: the renderer reads KubernetesVersion in the API's grammar
// (syntax.ParseKubernetesVersion), with the leading v optional.
func TestVersionGrammar(t *testing.T) {
	for s, want := range map[string]bool{
		"v1.2.3": true, "1.2.3": true, "v1.2.3+k3s1": true, "v1.2.3-rc.1+k0s.0": true, "1.30.0": true,
		"": false, "v1.2": false, "v1.2.3.4": false, "v1.2.3;x": false, "vv1.2.3": false, "v01.2.3": false,
		"v1.2.3+": false, "v1..3": false, "latest": false,
	} {
		if _, err := parseVersion(s); (err == nil) != want {
			t.Errorf("parseVersion(%q): %v, want accepted=%v", s, err, want)
		}
	}
}
