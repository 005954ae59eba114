package syntax

import (
	"regexp"
	"strings"
)

// An image reference, as container runtimes resolve it: [registry[:port]/]path[:tag][@digest].
// The grammar follows the OCI distribution reference rules (registry host names of DNS
// components, lower-case path components separated by '.', '_', '__' or dashes, tags of at most
// 128 word characters, dots and dashes, digests algorithm:hex), written out here because the
// module that defines it is not a dependency of common.
const (
	imageHost      = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?`
	imagePathPart  = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	imageTag       = `[\w][\w.-]{0,127}`
	imageDigest    = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	imageReference = `^(?:` + imageHost + `/)?` + imagePathPart + `(?:/` + imagePathPart + `)*(?::` + imageTag + `)?(?:@` + imageDigest + `)?$`
)

var imageRef = regexp.MustCompile(imageReference)

// maxImageNameLength is the longest repository name (registry and path) a registry accepts.
const maxImageNameLength = 255

// IsImageReference tells whether s is a container image reference such as
// ghcr.io/kube-vip/kube-vip:v1.0.4 or registry.example.com:5000/kairos/k3s@sha256:<hex>.
func IsImageReference(s string) bool {
	if !imageRef.MatchString(s) {
		return false
	}
	name, _, _ := strings.Cut(s, "@")
	// A tag follows the last ':' after the last '/' (a ':' before it is a registry port).
	if colon := strings.LastIndexByte(name, ':'); colon > strings.LastIndexByte(name, '/') {
		name = name[:colon]
	}
	return len(name) <= maxImageNameLength
}
