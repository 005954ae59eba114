package simnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// Reasons of an upgrade's reboot.
const (
	// ReasonRebooting: the node is rebooting (an upgrade, or a fallback to its passive image).
	ReasonRebooting = "Rebooting"
	// ReasonImageBroken: the image does not boot (Registry.BreakImage).
	ReasonImageBroken = "ImageDoesNotBoot"
	// ReasonDistributionMismatch: the image does not ship the distribution the node's document runs
	// (a k3s image on a k0s node): the distribution's service cannot start.
	ReasonDistributionMismatch = "DistributionMismatch"
	// ReasonVersionSkew: the image's distribution version is a skew Kubernetes does not support
	// (checkUpgradeSkew): the distribution refuses to start.
	ReasonVersionSkew = "VersionSkew"
)

// nodeImages are a node's OS images.
type nodeImages struct {
	active, passive, recovery string
	// running is the image the node booted last: active, or passive after a fallback.
	running string
}

// BootFailure is the error of an upgrade whose new image did not come up: the node booted its
// passive image again after BootAssessmentPeriod.
type BootFailure struct {
	// Image is the image that failed, Fallback the image the node runs again.
	Image, Fallback string
	// Reason is the node's reason (ReasonImageBroken, ReasonDistributionMismatch,
	// ReasonVersionSkew, ReasonPreflightFailed), Message its message.
	Reason, Message string
}

func (f *BootFailure) Error() string {
	return fmt.Sprintf("%s: %s; the node booted its fallback image %s again", f.Reason, f.Message, f.Fallback)
}

// Images returns the node's active and passive images (empty before the node loaded its
// document). After an upgrade whose image did not boot, active is still that image and the node
// runs its passive one (RunningImage), as Kairos leaves it after booting its fallback entry.
func (n *Node) Images() (active, passive string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.images.active, n.images.passive
}

// RecoveryImage returns the node's recovery image ("" until an upgrade wrote one).
func (n *Node) RecoveryImage() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.images.recovery
}

// RunningImage returns the image the node booted.
func (n *Node) RunningImage() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.images.running
}

// InstalledVersion returns the distribution version the running image ships.
func (n *Node) InstalledVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.installed
}

// firstImage settles the image of the node's first boot and returns the distribution version it
// ships ("" when it ships not the document's distribution: its binary is missing, so the
// preflight's `k0s version` / `k3s --version` prints nothing).
func (n *Node) firstImage(p *plan) (string, error) {
	installed := p.installedVersion(n.spec.InstalledVersion)
	ref := n.spec.Image
	if ref == "" && installed != "" {
		ref = KairosImage(p.distribution, installed)
	}
	if ref != "" {
		img, err := ParseImage(ref) // StartNode checked it
		if err != nil {
			return "", refuse(ReasonBootstrapDataRefused, "%v", err)
		}
		installed = img.Version
		if img.Distribution != p.distribution {
			installed = ""
			if _, ok := p.files[render.PreflightScript]; !ok {
				return "", refuse(ReasonDistributionMismatch, "the image %s ships %s, not %s: %s cannot start", ref, describeDistribution(img), p.distribution, serviceOf(p))
			}
		}
		n.writeRelease(img)
	}
	n.mu.Lock()
	n.images = nodeImages{active: ref, running: ref}
	n.installed = installed
	n.mu.Unlock()
	return installed, nil
}

// checkImageSpec checks what StartNode is given: a readable reference that agrees with
// InstalledVersion.
func checkImageSpec(spec NodeSpec) error {
	if spec.Image == "" {
		return nil
	}
	img, err := ParseImage(spec.Image)
	if err != nil {
		return err
	}
	if spec.InstalledVersion != "" && img.Version != spec.InstalledVersion {
		return fmt.Errorf("the image %s ships %s, but InstalledVersion is %s", spec.Image, img.Version, spec.InstalledVersion)
	}
	return nil
}

func describeDistribution(img Image) string {
	if img.Distribution == "" {
		return "no Kubernetes distribution"
	}
	return string(img.Distribution) + " " + img.Version
}

func serviceOf(p *plan) string { return render.ServiceName(p.distribution, p.role) }

// writeRelease writes the image's /etc/os-release and /etc/kairos-release below the node's root.
func (n *Node) writeRelease(img Image) {
	_ = n.writeFile("/etc/os-release", img.osRelease())
	_ = n.writeFile("/etc/kairos-release", img.kairosRelease())
}

// osImage is what the kubelet reports as status.nodeInfo.osImage: PRETTY_NAME of the running
// image's /etc/os-release.
func (n *Node) osImage() string {
	if img, err := ParseImage(n.RunningImage()); err == nil {
		return img.osImage()
	}
	return "Kairos (simulated)"
}

// Upgrade does what the Kairos operator's upgrade Job does on the node (`kairos-agent upgrade
// --source dir:/` inside the upgrade image, then a reboot): the image becomes the active image, the
// image it replaces the passive one, and the node reboots into it. It returns once the node runs
// again: nil on the new image, a *BootFailure when the image did not come up and the node booted
// its passive image again after BootAssessmentPeriod, another error when the upgrade could not
// start (the node does not run, the reference is not an image).
func (n *Node) Upgrade(ctx context.Context, ref string) error {
	if _, err := ParseImage(ref); err != nil {
		return fmt.Errorf("pulling the upgrade image: %w", err)
	}
	n.upgrading.Lock()
	defer n.upgrading.Unlock()
	if err := n.checkRunning(); err != nil {
		return err
	}
	n.mu.Lock()
	n.images.passive, n.images.active = n.images.running, ref
	n.mu.Unlock()
	return n.reboot(ctx)
}

// UpgradeRecovery writes the image to the node's recovery partition (`kairos-agent upgrade
// --recovery`): the running system is untouched and nothing reboots.
func (n *Node) UpgradeRecovery(ref string) error {
	if _, err := ParseImage(ref); err != nil {
		return fmt.Errorf("pulling the upgrade image: %w", err)
	}
	n.upgrading.Lock()
	defer n.upgrading.Unlock()
	if err := n.checkRunning(); err != nil {
		return err
	}
	n.mu.Lock()
	n.images.recovery = ref
	n.mu.Unlock()
	return nil
}

// Reboot reboots the node into its active image, with the same fallback as an upgrade.
func (n *Node) Reboot(ctx context.Context) error {
	n.upgrading.Lock()
	defer n.upgrading.Unlock()
	if err := n.checkRunning(); err != nil {
		return err
	}
	return n.reboot(ctx)
}

func (n *Node) checkRunning() error {
	s := n.Status()
	n.mu.Lock()
	p := n.plan
	n.mu.Unlock()
	if s.Phase != PhaseRunning || p == nil {
		return fmt.Errorf("node %s does not run (%s/%s)", n.spec.ProviderID, s.Phase, s.Reason)
	}
	return nil
}

// reboot stops what runs on the node (kubelet: its Lease is no longer renewed; the distribution;
// the etcd member process of a control-plane node) and boots the active image. An image that does
// not come up sends the node back to its passive image after BootAssessmentPeriod.
func (n *Node) reboot(ctx context.Context) error {
	active, passive := n.Images()
	n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonRebooting, Message: "rebooting into " + active})
	n.shutdownForReboot()
	err := n.bootImage(ctx, active)
	if err == nil {
		return nil
	}
	var r *refusal
	if !errors.As(err, &r) {
		// Not the image's fault (the cluster did not answer in time): the node is up on the image.
		return err
	}
	failure := &BootFailure{Image: active, Fallback: passive, Reason: r.reason, Message: r.err.Error()}
	n.setStatus(Status{Phase: PhaseBooting, Reason: r.reason, Message: r.err.Error() + "; boot assessment will fall back to " + passive})
	// The failed image's services never came up: nothing of it runs while the tries are used up.
	n.shutdownForReboot()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(BootAssessmentPeriod):
	}
	if passive == "" {
		n.setStatus(Status{Phase: PhaseRefused, Reason: r.reason, Message: r.err.Error() + "; no passive image to fall back to"})
		return failure
	}
	if err := n.bootImage(ctx, passive); err != nil {
		n.setStatus(Status{Phase: PhaseRefused, Reason: ReasonStartFailed, Message: fmt.Sprintf("the fallback image %s did not come up either: %v", passive, err)})
		return fmt.Errorf("%w; the fallback failed too: %v", failure, err)
	}
	return failure
}

// shutdownForReboot stops the node's kubelet, its part in the virtual IP and its etcd process; the
// member's data directory, certificates and membership stay.
func (n *Node) shutdownForReboot() {
	n.stopKubelet()
	n.dropVIP()
	if e := n.etcdServer(); e != nil {
		e.shutdown()
	}
}

// bootImage boots an image on the node: the checks its distribution's start runs (the image ships
// the distribution; the document's preflight, as the unit's ExecStartPre; the version skew), then
// the etcd member with its data, the kubelet with the new version.
func (n *Node) bootImage(ctx context.Context, ref string) error {
	img, err := ParseImage(ref)
	if err != nil {
		return refuse(ReasonImageBroken, "%v", err)
	}
	if n.reg.imageBroken(ref) {
		return refuse(ReasonImageBroken, "the image %s does not boot (kernel panic during boot; simulated with Registry.BreakImage)", ref)
	}
	n.mu.Lock()
	p, from, c := n.plan, n.installed, n.cluster
	n.mu.Unlock()
	if img.Distribution != p.distribution {
		return refuse(ReasonDistributionMismatch, "the image %s ships %s, not %s: %s cannot start", ref, describeDistribution(img), p.distribution, serviceOf(p))
	}
	// The preflight runs before every start of the service; after the first bootstrap it no
	// longer pins the version (render's BootstrapDoneMarker), a document without that guard does.
	if _, err := os.Stat(n.hostPath(render.BootstrapDoneMarker)); err != nil {
		if err := p.preflight(img.Version); err != nil {
			return err
		}
	}
	if err := checkUpgradeSkew(p.role, from, img.Version, n.controlPlanePeerVersions(c)); err != nil {
		return refuse(ReasonVersionSkew, "%s %s refuses to start: %v", p.distribution, img.Version, err)
	}

	n.writeRelease(img)
	n.mu.Lock()
	n.images.running = ref
	n.installed = img.Version
	kube := n.kubeletClient
	n.mu.Unlock()
	name := n.Name()
	if e := n.etcdServer(); e != nil {
		if err := e.run(); err != nil {
			return fmt.Errorf("starting etcd: %w", err)
		}
		if err := e.waitServing(ctx, 30*time.Second); err != nil {
			return err
		}
		if c != nil && p.distribution == render.K0s {
			// k0s publishes its EtcdMember at every controller start.
			if err := retryFor(ctx, 2*time.Minute, func() error { return c.joinK0sEtcd(ctx, e) }); err != nil {
				return fmt.Errorf("publishing the EtcdMember: %w", err)
			}
		}
	}
	if kube != nil {
		if err := retryFor(ctx, 2*time.Minute, func() error { return n.postBootStatus(ctx, kube, name, img) }); err != nil {
			return fmt.Errorf("the kubelet could not report the Node: %w", err)
		}
		n.startKubelet(kube, name)
	}
	if c != nil && c.vip != nil && p.role == render.RoleControlPlane {
		host, _, _ := net.SplitHostPort(c.endpoint)
		if holds, err := p.holdsVIP(host); err == nil && holds {
			_ = c.vip.join(n)
		}
	}
	n.setStatus(Status{Phase: PhaseRunning, Reason: ReasonRunning, Message: fmt.Sprintf("%s %s is up (image %s)", p.distribution, img.Version, ref)})
	return nil
}

// postBootStatus is what a kubelet starting on a rebooted machine reports for its existing Node:
// its version, the new boot ID, the OS image; it is Ready again.
func (n *Node) postBootStatus(ctx context.Context, kube kubernetes.Interface, name string, img Image) error {
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node.Status.NodeInfo.KubeletVersion = kubeletVersion(img.Version)
	node.Status.NodeInfo.BootID = randomHex(16)
	node.Status.NodeInfo.OSImage = img.osImage()
	now := metav1.Now()
	want := n.readyCondition()
	for i, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			want.LastHeartbeatTime, want.LastTransitionTime = now, cond.LastTransitionTime
			if cond.Status != want.Status {
				want.LastTransitionTime = now
			}
			node.Status.Conditions[i] = want
		}
	}
	_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// controlPlanePeerVersions are the versions the other running control-plane nodes of the cluster
// run.
func (n *Node) controlPlanePeerVersions(c *Cluster) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, o := range n.reg.Nodes() {
		if o == n || o.Cluster() != c || o.Role() != render.RoleControlPlane || o.Status().Phase != PhaseRunning {
			continue
		}
		if v := o.InstalledVersion(); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// retryFor calls fn until it succeeds or timeout passed (the API server may still be reconnecting
// to etcd after a reboot).
func retryFor(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// The document's image step (common/render imageScript): on a node's first boots, the network
// stage runs `/bin/sh <render.ImageScript> upgrade`, which upgrades the node to the image the
// script names unless /etc/kairos-release already shows it, and reboots; the distribution's
// preflight ("check") keeps it from starting on another image. The simulation reads the step
// and the script from the document, as yip and the shell would find them, and the running
// image's identity from the node's own /etc/kairos-release.
var (
	imageScriptImage   = regexp.MustCompile(`(?m)^image=(\S+)\s*$`)
	imageScriptRelease = regexp.MustCompile(`(?m)^release=(\S*)\s*$`)
)

// documentImage returns the image the document's network stage upgrades to and the
// /etc/kairos-release identity it expects of it ("" when the tag names none), or "" when the
// document has no image step.
func (p *plan) documentImage() (image, release string) {
	script, ok := p.files[render.ImageScript]
	if !ok {
		return "", ""
	}
	runs := false
	for _, c := range p.commands {
		if strings.Contains(c, render.ImageScript) && strings.HasSuffix(strings.TrimSpace(c), " upgrade") {
			runs = true
		}
	}
	m := imageScriptImage.FindStringSubmatch(script)
	if !runs || m == nil {
		return "", ""
	}
	if r := imageScriptRelease.FindStringSubmatch(script); r != nil {
		release = r[1]
	}
	return m[1], release
}

// runningRelease is what the image script computes from /etc/kairos-release:
// ${KAIROS_VERSION}-${KAIROS_SOFTWARE_VERSION_PREFIX}${KAIROS_SOFTWARE_VERSION}.
func (n *Node) runningRelease() string {
	raw, _ := os.ReadFile(n.hostPath("/etc/kairos-release"))
	vars := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			vars[k] = v
		}
	}
	return vars["KAIROS_VERSION"] + "-" + vars["KAIROS_SOFTWARE_VERSION_PREFIX"] + vars["KAIROS_SOFTWARE_VERSION"]
}

// followDocumentImage runs the document's image step on a node's first boot, before its
// distribution starts: a node that booted another image upgrades to the document's (the image
// becomes active, the booted one passive) and reboots into it. It returns the distribution
// version the node runs then. The upgrade is refused as Upgrade's boots are: an image of another
// distribution, or a version skew k0s/k3s do not allow from the booted image or next to the
// cluster's running control-plane nodes; an image that does not boot sends the node back to its
// passive image, where the script does not upgrade again and the preflight keeps the
// distribution stopped.
func (n *Node) followDocumentImage(p *plan, installed string) (string, error) {
	want, release := p.documentImage()
	if want == "" {
		return installed, nil
	}
	if _, err := os.Stat(n.hostPath(render.BootstrapDoneMarker)); err == nil {
		return installed, nil
	}
	upgraded, _ := os.ReadFile(n.hostPath(render.ImageUpgradeMarker))
	if (release != "" && n.runningRelease() == release) || (release == "" && strings.TrimSpace(string(upgraded)) == want) {
		return installed, nil
	}
	from := n.RunningImage()
	img, err := ParseImage(want)
	if err != nil {
		return "", refuse(ReasonImageBroken, "kairos-agent upgrade --source oci:%s: the simulation knows images by their Kairos reference only: %v", want, err)
	}
	if img.Distribution != p.distribution {
		return "", refuse(ReasonDistributionMismatch, "the document's image %s ships %s, not %s: %s cannot start", want, describeDistribution(img), p.distribution, serviceOf(p))
	}
	var peers []string
	if c := n.runningCluster(n.spec.Endpoint); c != nil {
		peers = n.controlPlanePeerVersions(c)
	}
	base := installed
	if base == "" {
		base = img.Version // the booted image ships no distribution: nothing to skip from
	}
	if err := checkUpgradeSkew(p.role, base, img.Version, peers); err != nil {
		return "", refuse(ReasonVersionSkew, "upgrading from %s to the document's image %s: %s %s refuses to start: %v", from, want, p.distribution, img.Version, err)
	}
	if err := n.writeFile(render.ImageUpgradeMarker, want+"\n"); err != nil {
		return "", retry(ReasonStartFailed, "writing %s: %v", render.ImageUpgradeMarker, err)
	}
	n.mu.Lock()
	n.images.passive, n.images.active = from, want
	n.mu.Unlock()
	n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonRebooting, Message: fmt.Sprintf("upgraded from %s to the document's image %s, rebooting into it", from, want)})
	if n.reg.imageBroken(want) {
		time.Sleep(BootAssessmentPeriod)
		return "", refuse(ReasonImageBroken, "the document's image %s does not boot; boot assessment fell back to %s, where the image step does not upgrade again and the preflight keeps %s stopped", want, from, serviceOf(p))
	}
	n.writeRelease(img)
	n.mu.Lock()
	n.images.running = want
	n.installed = img.Version
	n.mu.Unlock()
	n.imageReboots.Add(1)
	return img.Version, nil
}

// ImageReboots counts the reboots the document's image step caused.
func (n *Node) ImageReboots() int { return int(n.imageReboots.Load()) }
