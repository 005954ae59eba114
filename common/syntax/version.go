package syntax

import (
	"cmp"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// ParseKubernetesVersion parses a Kubernetes version as Cluster API writes Machine versions: a
// leading "v" followed by a semantic version as k8s.io/apimachinery's ParseSemantic reads it
// (major.minor.patch without leading zeros, then an optional pre-release and build metadata
// made of non-empty dot-separated identifiers). The distributions' releases fit: v1.31.2+k0s.0,
// v1.31.2+k3s1.
//
// ParseSemantic also takes a version without the "v" and skips surrounding white space; both
// are refused here, because the version reaches the node's preflight script as written and is
// compared there with what the distribution reports.
func ParseKubernetesVersion(s string) (*version.Version, error) {
	const want = "a semantic version with a leading v, for example v1.31.2"
	if !strings.HasPrefix(s, "v") || strings.TrimSpace(s) != s {
		return nil, fmt.Errorf("%q is not %s", s, want)
	}
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not %s: %w", s, want, err)
	}
	return v, nil
}

// CompareRelease orders two versions by major, minor and patch only; it returns -1, 0 or +1.
// Pre-release and build metadata do not order: v1.31.2-rc.1, v1.31.2 and v1.31.2+k0s.0 are
// the same release, so that moving between them is neither an upgrade nor a downgrade and the
// k0s v1.30 release candidates count as v1.30. (util/version's LessThan and AtLeast order
// pre-releases first when both sides are semantic versions.)
func CompareRelease(a, b *version.Version) int {
	return cmp.Or(
		cmp.Compare(a.Major(), b.Major()),
		cmp.Compare(a.Minor(), b.Minor()),
		cmp.Compare(a.Patch(), b.Patch()),
	)
}
