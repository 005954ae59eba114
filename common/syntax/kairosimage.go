package syntax

import (
	"regexp"
	"strings"
)

// KairosImage is what the tag of a standard Kairos image tells about the distribution it ships.
//
// Kairos names its standard images
//
//	<registry>/<flavor>:<flavor release>-<variant>-<arch>-<model>-<kairos version>-<k3s|k0s>v<kubernetes version>-<build>
//
// e.g. quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1: "the version for
// the standard image includes both the Kairos and the K3S version e.g. v3.0.1-k3sv1.28.2+k3s1"
// (https://kairos.io/docs/reference/artifacts/); an OCI tag cannot hold "+", so the published tags
// write the build after a "-". k0s images follow the same scheme with k0sv<version>-k0s.<n>.
// Custom images built with kairos-init may use any tag, and a digest names no version at all:
// those are not a KairosImage.
type KairosImage struct {
	// KairosVersion is the Kairos release (v3.5.0), as /etc/kairos-release's KAIROS_VERSION.
	KairosVersion string
	// Distribution is k0s or k3s, as KAIROS_SOFTWARE_VERSION_PREFIX.
	Distribution string
	// KubernetesVersion is the Kubernetes release (v1.36.3), Build the distribution's build
	// (k3s1, k0s.0).
	KubernetesVersion, Build string
}

// SoftwareVersion is what the distribution reports (`k3s --version`: v1.36.3+k3s1, `k0s
// version`: v1.36.3+k0s.0), and what kairos-init writes as KAIROS_SOFTWARE_VERSION.
func (k KairosImage) SoftwareVersion() string { return k.KubernetesVersion + "+" + k.Build }

// Release is the identity of the image that a node booted from it finds in /etc/kairos-release:
// ${KAIROS_VERSION}-${KAIROS_SOFTWARE_VERSION_PREFIX}${KAIROS_SOFTWARE_VERSION}, the triple the
// Kairos operator compares to tell whether a node already runs an upgrade image.
func (k KairosImage) Release() string {
	return k.KairosVersion + "-" + k.Distribution + k.SoftwareVersion()
}

// kairosTagSuffix is the end of a standard image's tag: -<kairos version>-<dist>v<k8s>-<build>.
// The Kairos version is the last v<digit>... component before the distribution (a pre-release
// such as v3.5.0-rc1 keeps its dash).
var kairosTagSuffix = regexp.MustCompile(`(?:^|-)(v[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+?)?)-(k3s|k0s)v([0-9]+\.[0-9]+\.[0-9]+)-([0-9A-Za-z.]+)$`)

// ParseKairosImage reads the distribution and versions from the tag of an image reference. ok is
// false when the reference has no tag (a digest only) or its tag does not end the way Kairos names
// standard images: such an image cannot be checked before a node boots it. A digest after the
// tag does not change what the tag says.
func ParseKairosImage(ref string) (img KairosImage, ok bool) {
	name, _, _ := strings.Cut(ref, "@")
	colon := strings.LastIndexByte(name, ':')
	if colon <= strings.LastIndexByte(name, '/') {
		return KairosImage{}, false
	}
	m := kairosTagSuffix.FindStringSubmatch(name[colon+1:])
	if m == nil {
		return KairosImage{}, false
	}
	return KairosImage{KairosVersion: m[1], Distribution: m[2], KubernetesVersion: "v" + m[3], Build: m[4]}, true
}

// ImageShipsVersion tells whether an image whose distribution reports software (v1.36.3+k3s1)
// satisfies a requested version the way the node's preflight compares them: a version without
// build metadata (v1.36.3) names the Kubernetes release; v1.36.3+k3s1 pins that build; v1.36.3+k0s
// (what the kubelet of k0s reports) matches every v1.36.3+k0s.N.
func ImageShipsVersion(software, want string) bool {
	if !strings.Contains(want, "+") {
		core, _, _ := strings.Cut(software, "+")
		return core == want
	}
	return software == want || strings.HasPrefix(software, want+".")
}
