package simnode

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// A Kairos node carries two OS images, active and passive (plus a recovery image): an upgrade
// writes the new image as active and keeps the image it replaces as passive, the fallback the
// boot loader turns to when the new one does not boot (https://kairos.io/docs/upgrade/, and
// https://kairos.io/docs/upgrade/boot_assessment/). The simulation names images by their OCI
// reference, the way Kairos publishes its standard images:
//
//	quay.io/kairos/<flavor>:<flavor release>-<variant>-<arch>-<model>-<kairos version>-<k3s|k0s>v<kubernetes version>-<build>
//
// e.g. quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1 (Kairos' artifact
// naming convention, https://kairos.io/docs/reference/artifacts/: "the version for the standard
// image includes both the Kairos and the K3S version e.g. v3.0.1-k3sv1.28.2+k3s1"; an OCI tag cannot
// hold "+", so the published tags write it "-", as `kairos-agent upgrade list-releases` shows:
// quay.io/kairos/ubuntu:22.04-standard-arm64-generic-v0.0.1-k3sv1.35.0-k3s1). k0s images follow
// the same scheme with k0sv<version>-k0s.<n>. A core image (no distribution) has no such suffix.

// DefaultKairosVersion, DefaultImageFlavor and DefaultImageFlavorRelease make the reference of a
// node's image when its infrastructure names none (NodeSpec.Image).
const (
	DefaultImageRepository    = "quay.io/kairos"
	DefaultImageFlavor        = "ubuntu"
	DefaultImageFlavorRelease = "24.04"
	DefaultKairosVersion      = "v3.5.0"
)

// BootAssessmentPeriod is how long a boot that fails before userspace takes to come back to GRUB:
// Kairos boots with panic=5, rd.emergency=reboot and systemd.crash_reboot, so a kernel panic, a
// failing initramfs or a crashing systemd reboots the machine (08_grub.yaml's command line; the
// Kairos docs' boot assessment page); GRUB then applies its boot assessment rule
// (bootassessment.go). On real hardware that is the panic delay plus a firmware and kernel boot,
// a minute or two; the simulation shortens it so that tests can wait for it. Tests may set it
// before nodes upgrade.
var BootAssessmentPeriod = 3 * time.Second

// VerifyTimeout stands for render.BootAssessmentTimeout (ten minutes on a node): how long the
// document's verify step waits on an armed boot for the distribution to be ready before it
// reboots into the fallback image. The simulation shortens it; tests may set it before nodes
// upgrade.
var VerifyTimeout = 3 * time.Second

// Image is what a Kairos image reference tells about the image.
type Image struct {
	// Ref is the reference as given.
	Ref string
	// Repository is the reference without the tag (quay.io/kairos/ubuntu).
	Repository string
	// Flavor is the base distribution (the last path element: ubuntu), FlavorRelease its
	// release (24.04).
	Flavor, FlavorRelease string
	// Variant is core or standard; Arch amd64 or arm64; Model generic or a board.
	Variant, Arch, Model string
	// KairosVersion is the Kairos release (v3.5.0).
	KairosVersion string
	// Distribution is the Kubernetes distribution the image ships (empty for a core image).
	Distribution render.Distribution
	// Version is what `k0s version` / `k3s --version` prints on a node of the image:
	// v1.36.3+k3s1, v1.36.3+k0s.0.
	Version string
}

var imageTag = regexp.MustCompile(`^([^-]+)-(core|standard)-([a-z0-9]+)-([a-z0-9]+)-(v[0-9][0-9A-Za-z.\-]*?)(?:-(k3s|k0s)v([0-9]+\.[0-9]+\.[0-9]+)-([0-9A-Za-z.]+))?$`)

// ParseImage reads a Kairos image reference.
func ParseImage(ref string) (Image, error) {
	repo, tag, ok := strings.Cut(ref, ":")
	// A registry port also has a colon: the tag is after the last one, past the last slash.
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag, ok = ref[:i], ref[i+1:], true
	}
	if !ok || repo == "" || tag == "" {
		return Image{}, fmt.Errorf("image %q has no tag", ref)
	}
	m := imageTag.FindStringSubmatch(tag)
	if m == nil {
		return Image{}, fmt.Errorf("image %q: the tag %q does not follow Kairos' naming (<flavor release>-<variant>-<arch>-<model>-<kairos version>[-<k3s|k0s>v<version>-<build>])", ref, tag)
	}
	img := Image{
		Ref: ref, Repository: repo, Flavor: repo[strings.LastIndex(repo, "/")+1:],
		FlavorRelease: m[1], Variant: m[2], Arch: m[3], Model: m[4], KairosVersion: m[5],
	}
	if m[6] != "" {
		img.Distribution = render.Distribution(m[6])
		img.Version = "v" + m[7] + "+" + m[8]
	}
	if img.Variant == "standard" && img.Distribution == "" {
		return Image{}, fmt.Errorf("image %q: a standard image names its distribution (k3sv<version> or k0sv<version>)", ref)
	}
	return img, nil
}

// KairosImage returns the reference of the standard Kairos image (DefaultImageRepository,
// DefaultImageFlavor, DefaultKairosVersion, amd64, generic) that ships a distribution at a version:
// v1.36.3 or v1.36.3+k3s1 (the build defaults to k3s1 / k0s.0).
func KairosImage(dist render.Distribution, version string) string {
	v, build, ok := strings.Cut(version, "+")
	if !ok {
		build = "k3s1"
		if dist == render.K0s {
			build = "k0s.0"
		}
	}
	return fmt.Sprintf("%s/%s:%s-standard-amd64-generic-%s-%sv%s-%s", DefaultImageRepository, DefaultImageFlavor,
		DefaultImageFlavorRelease, DefaultKairosVersion, dist, strings.TrimPrefix(v, "v"), build)
}

// kairosRelease is /etc/kairos-release of a node booted from the image: the KAIROS_* variables
// kairos-init writes there (kairos-io/kairos-init, GetKairosReleaseStage), which the Kairos operator
// reads to tell whether a node already runs an upgrade image (its version triple
// ${KAIROS_VERSION}-${KAIROS_SOFTWARE_VERSION_PREFIX}${KAIROS_SOFTWARE_VERSION}).
func (img Image) kairosRelease() string {
	var b strings.Builder
	for _, kv := range [][2]string{
		{"KAIROS_ID", "kairos"},
		{"KAIROS_NAME", "kairos-" + img.Variant + "-" + img.Flavor + "-" + img.FlavorRelease},
		{"KAIROS_VERSION", img.KairosVersion},
		{"KAIROS_RELEASE", img.KairosVersion},
		{"KAIROS_FLAVOR", img.Flavor},
		{"KAIROS_FLAVOR_RELEASE", img.FlavorRelease},
		{"KAIROS_VARIANT", img.Variant},
		{"KAIROS_ARCH", img.Arch},
		{"KAIROS_MODEL", img.Model},
		{"KAIROS_IMAGE_REPO", img.Ref},
		{"KAIROS_SOFTWARE_VERSION_PREFIX", string(img.Distribution)},
		{"KAIROS_SOFTWARE_VERSION", img.Version},
	} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s=%q\n", kv[0], kv[1])
		}
	}
	return b.String()
}

// versionTriple is what the Kairos operator compares between a node and an upgrade image.
func (img Image) versionTriple() string {
	return img.KairosVersion + "-" + string(img.Distribution) + img.Version
}

// osRelease is /etc/os-release of a node booted from the image: current Kairos images keep the
// base distribution's os-release and move their own KAIROS_* variables to /etc/kairos-release
// (kairos-io/AuroraBoot image-assets/update-os-release.sh strips KAIROS_ lines from os-release
// and writes kairos-release). The kubelet reports PRETTY_NAME as the Node's status.nodeInfo.osImage,
// so the osImage of a Kairos node names its base distribution, not its Kairos or Kubernetes
// version; kubeletVersion is what reveals an upgrade.
func (img Image) osRelease() string {
	name := img.Flavor
	if name != "" {
		name = strings.ToUpper(name[:1]) + name[1:]
	}
	pretty := strings.TrimSpace(name + " " + img.FlavorRelease)
	if img.Flavor == "ubuntu" {
		pretty += " LTS"
	}
	return fmt.Sprintf("NAME=%q\nID=%s\nVERSION_ID=%q\nPRETTY_NAME=%q\n", name, img.Flavor, img.FlavorRelease, pretty)
}

// osImage is the PRETTY_NAME of osRelease.
func (img Image) osImage() string {
	for _, line := range strings.Split(img.osRelease(), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			s, _ := strconv.Unquote(v)
			return s
		}
	}
	return ""
}

// semver is a Kubernetes version's numbers.
type semver struct{ major, minor, patch int }

func parseSemver(v string) (semver, error) {
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "+")
	core, _, _ = strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return semver{}, fmt.Errorf("version %q is not v<major>.<minor>.<patch>", v)
	}
	var out [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return semver{}, fmt.Errorf("version %q is not v<major>.<minor>.<patch>", v)
		}
		out[i] = n
	}
	return semver{out[0], out[1], out[2]}, nil
}

func (s semver) String() string { return fmt.Sprintf("v%d.%d.%d", s.major, s.minor, s.patch) }

// checkUpgradeSkew applies the Kubernetes version skew policy to a node that ran from and boots
// to (https://kubernetes.io/releases/version-skew-policy/: kube-apiserver instances of a cluster
// stay within one minor version of each other, so a control plane moves one minor at a time, and a
// kubelet is never newer than kube-apiserver); k0s follows it
// ("Upgrade controllers first, one minor at a time (e.g. v1.30 -> v1.31, not v1.30 -> v1.32)";
// "Downgrades are not supported", https://docs.k0sproject.io/main/version-skew-policy/) and so
// does k3s ("the Kubernetes version skew policy applies. Ensure that your plan does not skip
// intermediate minor versions", https://docs.k3s.io/upgrades/automated). Patch releases of one
// minor may come and go. peers are the versions the cluster's other control-plane nodes run.
func checkUpgradeSkew(role render.Role, from, to string, peers []string) error {
	f, err := parseSemver(from)
	if err != nil {
		return err
	}
	t, err := parseSemver(to)
	if err != nil {
		return err
	}
	switch {
	case t.major != f.major:
		return fmt.Errorf("%s -> %s changes the major version", f, t)
	case t.minor > f.minor+1:
		return fmt.Errorf("%s -> %s skips %d minor version(s): Kubernetes upgrades one minor version at a time", f, t, t.minor-f.minor-1)
	case t.minor < f.minor:
		return fmt.Errorf("%s -> %s downgrades the minor version: downgrades are not supported", f, t)
	}
	for _, p := range peers {
		pv, err := parseSemver(p)
		if err != nil {
			continue
		}
		if role == render.RoleControlPlane && (t.minor > pv.minor+1 || pv.minor > t.minor+1) {
			return fmt.Errorf("%s would be more than one minor version away from the control-plane node at %s", t, pv)
		}
		if role != render.RoleControlPlane && t.minor > pv.minor {
			return fmt.Errorf("a kubelet at %s would be newer than the kube-apiserver at %s", t, pv)
		}
	}
	return nil
}

// BreakImage marks an image as broken: a node that boots it never comes up (its kernel panics
// or its systemd crashes), so boot assessment sends it back to its passive image.
func (r *Registry) BreakImage(ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken == nil {
		r.broken = map[string]bool{}
	}
	r.broken[ref] = true
}

func (r *Registry) imageBroken(ref string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broken[ref]
}
