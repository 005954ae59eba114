package syntax_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

func TestIsLinuxName(t *testing.T) {
	pattern := regexp.MustCompile(syntax.LinuxNamePattern)
	for _, s := range []string{"", "kairos", "_x", "a-b", "a_b1", "1a", "-a", "A", "a.b", "Root User", "Admins", strings.Repeat("a", 32), strings.Repeat("a", 33)} {
		if got, want := syntax.IsLinuxName(s), pattern.MatchString(s); got != want {
			t.Errorf("IsLinuxName(%q) = %v, want %v (the pattern)", s, got, want)
		}
	}
}

func TestIsFileOwner(t *testing.T) {
	for s, want := range map[string]bool{
		"root:root": true, "kairos:admin": true, "1000:1001": true, "0:0": true, "systemd-network:_x": true,
		"": false, "root": false, "root:": false, ":root": false, "root:1000": false, "1000:root": false,
		"Root:root": false, "a.b:c": false, "a:b:c": false, "12345678901:0": false, " root:root": false,
		// Ids are 32 bits and (uid_t)-1 means "leave unchanged": chown would give 4294967296 to root.
		"4294967294:4294967294": true, "4294967295:0": false, "0:4294967296": false, "9999999999:0": false,
	} {
		if got := syntax.IsFileOwner(s); got != want {
			t.Errorf("IsFileOwner(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestIsEnvName(t *testing.T) {
	for s, want := range map[string]bool{
		"K0S_DEBUG": true, "_x": true, "http_proxy": true, "a1": true,
		"": false, "1BAD": false, "A-B": false, "A B": false, "A=B": false, "Ä": false,
	} {
		if got := syntax.IsEnvName(s); got != want {
			t.Errorf("IsEnvName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestManifestNames(t *testing.T) {
	for s, want := range map[string]bool{
		"cni": true, "a": true, "0": true, "my-app": true, "a.b_c": true, "worker-bootstrap-token": true,
		strings.Repeat("a", syntax.MaxManifestNameLength): true,
		"": false, "-a": false, "a-": false, "a.": false, "a_": false, "A": false, "a/b": false, "../passwd": false,
		strings.Repeat("a", syntax.MaxManifestNameLength+1): false,
	} {
		if got := syntax.IsManifestName(s); got != want {
			t.Errorf("IsManifestName(%q) = %v, want %v", s, got, want)
		}
	}

	for _, tc := range []struct {
		file, name string
		ok         bool
	}{
		{"cni.yaml", "cni", true},
		{"cni.yml", "cni", true},
		{"my-app.yml", "my-app", true},
		{"a.b_c.yaml", "a.b_c", true},
		{"cni.yml.yaml", "cni", true},
		{"cni.yaml.yml", "cni.yaml", true},
		{"cni", "cni", false},
		{"cni.json", "cni.json", false},
		{".yaml", "", false},
		{"../passwd.yaml", "../passwd", false},
		{"CNI.yaml", "CNI", false},
		// The renderer writes <name>.yaml and refuses a name ending in punctuation; the API's
		// own pattern accepted these file names before both used this package.
		{"a-.yaml", "a-", false},
		{"a..yaml", "a.", false},
		{"a_.yml", "a_", false},
	} {
		name, ok := syntax.ManifestFileName(tc.file)
		if name != tc.name || ok != tc.ok {
			t.Errorf("ManifestFileName(%q) = %q, %v, want %q, %v", tc.file, name, ok, tc.name, tc.ok)
		}
	}
}
