package v1beta2_test

import (
	"strings"
	"testing"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func TestParseVersion(t *testing.T) {
	valid := map[string]controlplanev1.Version{
		"v1.31.2":             {Major: 1, Minor: 31, Patch: 2},
		"v0.0.0":              {},
		"v1.30.0+k0s.0":       {Major: 1, Minor: 30},
		"v1.31.4+k3s1":        {Major: 1, Minor: 31, Patch: 4},
		"v1.32.0-rc.1":        {Major: 1, Minor: 32},
		"v1.32.0-alpha.2+k3s": {Major: 1, Minor: 32},
		"v10.200.3000":        {Major: 10, Minor: 200, Patch: 3000},
	}
	for in, want := range valid {
		got, err := controlplanev1.ParseVersion(in)
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("ParseVersion(%q) = %+v, want %+v", in, got, want)
		}
	}

	for _, in := range []string{"", "1.31.2", "v1.31", "v1", "V1.31.2", "v1.31.2.3", "v01.31.2", "v1.031.2", "v1.31.02", "v1.31.x", " v1.31.2", "v1.31.2 ", "v1.31.2-", "v1.31.2+", "latest", "v-1.31.2"} {
		_, err := controlplanev1.ParseVersion(in)
		if err == nil {
			t.Errorf("ParseVersion(%q) accepted", in)
			continue
		}
		// The error says what is expected.
		if !strings.Contains(err.Error(), "leading v, for example v1.31.2") {
			t.Errorf("ParseVersion(%q) error does not show the expected form: %v", in, err)
		}
	}
}

func TestVersionLess(t *testing.T) {
	v := func(s string) controlplanev1.Version {
		t.Helper()
		out, err := controlplanev1.ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		a, b string
		less bool
	}{
		{"v1.31.2", "v1.31.3", true},
		{"v1.31.9", "v1.32.0", true},
		{"v1.99.99", "v2.0.0", true},
		{"v1.31.10", "v1.31.9", false}, // numeric, not lexical
		{"v1.9.0", "v1.10.0", true},
		{"v1.31.2", "v1.31.2", false},
		{"v2.0.0", "v1.99.99", false},
		{"v1.32.0", "v1.31.9", false},
		// Pre-release and build parts do not order.
		{"v1.31.2-rc.1", "v1.31.2", false},
		{"v1.31.2", "v1.31.2-rc.1", false},
		{"v1.31.2+k0s.0", "v1.31.2+k0s.1", false},
	}
	for _, tc := range tests {
		a, b := v(tc.a), v(tc.b)
		if got := a.Less(b); got != tc.less {
			t.Errorf("%s < %s = %v, want %v", tc.a, tc.b, got, tc.less)
		}
		// Strict order: never both a<b and b<a.
		if a.Less(b) && b.Less(a) {
			t.Errorf("%s and %s are each less than the other", tc.a, tc.b)
		}
	}
}
