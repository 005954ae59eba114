package syntax_test

import (
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

func TestParseKairosImage(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		ref     string
		want    syntax.KairosImage
		ok      bool
		release string
	}{
		{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1",
			syntax.KairosImage{KairosVersion: "v3.5.0", Distribution: "k3s", KubernetesVersion: "v1.36.3", Build: "k3s1"}, true, "v3.5.0-k3sv1.36.3+k3s1"},
		{"registry.local:5000/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.36.3-k0s.0",
			syntax.KairosImage{KairosVersion: "v3.5.0", Distribution: "k0s", KubernetesVersion: "v1.36.3", Build: "k0s.0"}, true, "v3.5.0-k0sv1.36.3+k0s.0"},
		{"quay.io/kairos/opensuse:leap-15.6-standard-arm64-rpi4-v3.5.0-rc1-k3sv1.37.0-k3s1",
			syntax.KairosImage{KairosVersion: "v3.5.0-rc1", Distribution: "k3s", KubernetesVersion: "v1.37.0", Build: "k3s1"}, true, "v3.5.0-rc1-k3sv1.37.0+k3s1"},
		{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1" + digest,
			syntax.KairosImage{KairosVersion: "v3.5.0", Distribution: "k3s", KubernetesVersion: "v1.36.3", Build: "k3s1"}, true, "v3.5.0-k3sv1.36.3+k3s1"},
		{"quay.io/kairos/ubuntu" + digest, syntax.KairosImage{}, false, ""},
		{"quay.io/kairos/ubuntu:24.04-core-amd64-generic-v3.5.0", syntax.KairosImage{}, false, ""},
		{"registry.local:5000/edge/node:2026.11", syntax.KairosImage{}, false, ""},
		{"registry.local:5000/edge/node", syntax.KairosImage{}, false, ""},
	} {
		got, ok := syntax.ParseKairosImage(tc.ref)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseKairosImage(%q) = %+v, %v; want %+v, %v", tc.ref, got, ok, tc.want, tc.ok)
			continue
		}
		if ok && got.Release() != tc.release {
			t.Errorf("%q: Release() = %q, want %q", tc.ref, got.Release(), tc.release)
		}
	}
}

func TestImageShipsVersion(t *testing.T) {
	for _, tc := range []struct {
		software, want string
		ok             bool
	}{
		{"v1.36.3+k3s1", "v1.36.3", true},
		{"v1.36.3+k3s1", "v1.36.3+k3s1", true},
		{"v1.36.3+k3s2", "v1.36.3+k3s1", false},
		{"v1.36.3+k0s.0", "v1.36.3+k0s", true},
		{"v1.36.3+k0s.1", "v1.36.3+k0s.1", true},
		{"v1.36.3+k3s1", "v1.37.0", false},
		{"v1.36.3+k3s1", "v1.36", false},
	} {
		if got := syntax.ImageShipsVersion(tc.software, tc.want); got != tc.ok {
			t.Errorf("ImageShipsVersion(%q, %q) = %v, want %v", tc.software, tc.want, got, tc.ok)
		}
	}
}
