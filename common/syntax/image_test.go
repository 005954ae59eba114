package syntax_test

import (
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

func TestIsImageReference(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for ref, want := range map[string]bool{
		"ghcr.io/kube-vip/kube-vip:v1.0.4": true,
		"kube-vip":                         true,
		"library/busybox:1.36":             true,
		"registry.example.com:5000/mirror/kube-vip/kube-vip:v1.0.4":                 true,
		"localhost:5000/kube-vip@" + digest:                                         true,
		"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.37.0-k3s1": true,
		"ghcr.io/kube-vip/kube-vip:v1.0.4@" + digest:                                true,
		"":                                   false,
		"ghcr.io/Kube-Vip/kube-vip:v1.0.4":   false, // upper case in the path
		"ghcr.io/kube-vip/kube-vip:":         false,
		"ghcr.io/kube-vip/kube-vip:v1 0":     false,
		"ghcr.io/kube-vip/kube-vip\n  args:": false, // YAML spliced in
		"ghcr.io//kube-vip":                  false,
		"kube-vip@sha256:abc":                false, // digest too short
		"-registry/kube-vip":                 false,
		"ghcr.io/kube-vip/kube-vip:" + strings.Repeat("a", 129): false,
		strings.Repeat("a", 256):                                false,
	} {
		if got := syntax.IsImageReference(ref); got != want {
			t.Errorf("IsImageReference(%q) = %v, want %v", ref, got, want)
		}
	}
}
