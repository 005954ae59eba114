package framework_test

import (
	"fmt"
	"strings"
	"testing"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// recorder is a testing.TB that records Errorf instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestExpectDefaulted(t *testing.T) {
	sent := bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "pw"}}
	defaulted := func() bootstrapv1.KairosConfigSpec {
		s := *sent.DeepCopy()
		s.Default()
		return s
	}
	tests := []struct {
		name string
		sent bootstrapv1.KairosConfigSpec
		got  bootstrapv1.KairosConfigSpec
		want []string // substrings of the recorded errors; nil: none
	}{
		{"admitted with the defaults", sent, defaulted(), nil},
		{"not defaulted (no webhook)", sent, sent, []string{"is not the spec sent with Default() applied", "userName"}},
		{"more than the defaults", sent, func() bootstrapv1.KairosConfigSpec { s := defaulted(); s.Hostname = "node"; return s }(),
			[]string{"is not the spec sent with Default() applied", "hostname"}},
		{"nothing to default", defaulted(), defaulted(), []string{"Default() changes nothing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			framework.ExpectDefaulted(r, "spec", tc.sent, tc.got)
			if tc.want == nil {
				if len(r.errs) != 0 {
					t.Fatalf("errors: %q", r.errs)
				}
				return
			}
			all := strings.Join(r.errs, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("errors %q do not contain %q", all, w)
				}
			}
		})
	}
}
