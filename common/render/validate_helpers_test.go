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
	for _, s := range []string{"", "v1.2.3", "1.2.3", "v1.2", "v1.2.3.4", "v1.2.3+k3s1", "v1.2.3-rc.1+k0s.0", "v1.2.3;x", "vv1.2.3", "v01.2.3", "v1.2.3+", "v1..3"} {
		if got, want := isVersion(s), versionPattern.MatchString(s); got != want {
			t.Errorf("isVersion(%q) = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"", "kairos", "_x", "a-b", "a_b1", "1a", "-a", "A", "a.b", strings.Repeat("a", 32), strings.Repeat("a", 33)} {
		if got, want := isUserName(s), userNamePattern.MatchString(s); got != want {
			t.Errorf("isUserName(%q) = %v, want %v", s, got, want)
		}
	}
}
