package syntax_test

import (
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

func TestParseKubernetesVersion(t *testing.T) {
	valid := map[string][3]uint{
		"v1.31.2":             {1, 31, 2},
		"v0.0.0":              {},
		"v1.30.0+k0s.0":       {1, 30, 0},
		"v1.31.4+k3s1":        {1, 31, 4},
		"v1.34.1+k0s":         {1, 34, 1},
		"v1.32.0-rc.1":        {1, 32, 0},
		"v1.32.0-alpha.2+k3s": {1, 32, 0},
		"v1.31.2-rc.1+k0s.0":  {1, 31, 2},
		"v10.200.3000":        {10, 200, 3000},
	}
	for in, want := range valid {
		v, err := syntax.ParseKubernetesVersion(in)
		if err != nil {
			t.Errorf("ParseKubernetesVersion(%q): %v", in, err)
			continue
		}
		if got := [3]uint{v.Major(), v.Minor(), v.Patch()}; got != want {
			t.Errorf("ParseKubernetesVersion(%q) = %v, want %v", in, got, want)
		}
	}

	for _, in := range []string{
		"", "1.31.2", "v1.31", "v1", "V1.31.2", "v1.31.2.3", "v01.31.2", "v1.031.2", "v1.31.02", "v1.31.x",
		" v1.31.2", "v1.31.2 ", "v1.31.2\n", "v1.31.2-", "v1.31.2+", "latest", "v-1.31.2", "vv1.31.2", "v1.2.3;rm -rf /",
		// Semantic versions have no empty identifiers, no leading zeros in numeric
		// pre-release identifiers and no "+" in build metadata; the API grammars before this
		// package accepted these.
		"v1.31.2-rc..1", "v1.31.2-.rc", "v1.31.2-rc.", "v1.31.2+k0s.", "v1.31.2-01", "v1.31.2+k3s1+x",
		// The renderer's grammar accepted these.
		"v1.31.2-+k0s", "v1.31.2+",
	} {
		_, err := syntax.ParseKubernetesVersion(in)
		if err == nil {
			t.Errorf("ParseKubernetesVersion(%q) accepted", in)
			continue
		}
		// The error says what is expected.
		if !strings.Contains(err.Error(), "leading v, for example v1.31.2") {
			t.Errorf("ParseKubernetesVersion(%q) error does not show the expected form: %v", in, err)
		}
	}
}

func TestCompareRelease(t *testing.T) {
	v := func(s string) string {
		t.Helper()
		if _, err := syntax.ParseKubernetesVersion(s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		a, b string
		want int
	}{
		{"v1.31.2", "v1.31.3", -1},
		{"v1.31.9", "v1.32.0", -1},
		{"v1.99.99", "v2.0.0", -1},
		{"v1.31.10", "v1.31.9", 1}, // numeric, not lexical
		{"v1.9.0", "v1.10.0", -1},
		{"v1.31.2", "v1.31.2", 0},
		{"v2.0.0", "v1.99.99", 1},
		{"v1.32.0", "v1.31.9", 1},
		// Pre-release and build parts do not order.
		{"v1.31.2-rc.1", "v1.31.2", 0},
		{"v1.31.2", "v1.31.2-rc.1", 0},
		{"v1.31.2+k0s.0", "v1.31.2+k0s.1", 0},
		{"v1.30.0-rc.1+k0s.0", "v1.30.0", 0},
	}
	for _, tc := range tests {
		a, _ := syntax.ParseKubernetesVersion(v(tc.a))
		b, _ := syntax.ParseKubernetesVersion(v(tc.b))
		if got := syntax.CompareRelease(a, b); got != tc.want {
			t.Errorf("CompareRelease(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		// Antisymmetric: never both a<b and b<a.
		if got := syntax.CompareRelease(b, a); got != -tc.want {
			t.Errorf("CompareRelease(%s, %s) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}
