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

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
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
	// ReasonPreviousBootFailed: GRUB's boot assessment variables were still set from an earlier
	// failed boot (Kairos clears them only on a good boot of active.img), so GRUB booted the
	// fallback entry without trying the new image (see ClearBootAssessment).
	ReasonPreviousBootFailed = "PreviousBootFailed"
)

// nodeImages are a node's OS images.
type nodeImages struct {
	active, passive, recovery string
	// running is the image the node booted last: active, or passive after a fallback.
	running string
}

// BootFailure is the error of an upgrade whose new image did not come up and that GRUB's boot
// assessment undid: the node booted its fallback (passive) image again, after a boot that failed
// before userspace (BootAssessmentPeriod) or after the document's verify step gave up on the
// distribution (VerifyTimeout).
type BootFailure struct {
	// Image is the image that failed, Fallback the image the node runs again.
	Image, Fallback string
	// Reason is the node's reason (ReasonImageBroken, ReasonDistributionMismatch,
	// ReasonVersionSkew, ReasonPreflightFailed, ReasonPreviousBootFailed), Message its message.
	Reason, Message string
}

func (f *BootFailure) Error() string {
	return fmt.Sprintf("%s: %s; the node booted its fallback image %s again", f.Reason, f.Message, f.Fallback)
}

// DistributionFailure is the error of an upgrade whose new image booted but whose distribution
// did not start, on a node whose document does not assess the distribution: Kairos counted the
// boot as good once userspace ran, so nothing falls back and the node stays on the image
// without Kubernetes.
type DistributionFailure struct {
	// Image is the image the node runs.
	Image string
	// Reason is the node's reason (ReasonDistributionMismatch, ReasonVersionSkew,
	// ReasonPreflightFailed), Message its message.
	Reason, Message string
}

func (f *DistributionFailure) Error() string {
	return fmt.Sprintf("%s: %s; the image %s booted, so boot assessment kept it: the node runs it without Kubernetes", f.Reason, f.Message, f.Image)
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
// image it replaces the passive one (booted from the passive image, the agent keeps it), Kairos'
// after-upgrade stage enables the boot assessment, and the node reboots. It returns once the node
// has settled: nil on the new image, a *BootFailure when GRUB's boot assessment sent the node back
// to its passive image (bootassessment.go), a *DistributionFailure when the node stays on the
// new image without its distribution, another error when the upgrade could not start (the node
// does not run, the reference is not an image).
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
	p := n.plan
	n.mu.Unlock()
	// kairos-agent runs the before-upgrade stage once the partitions are mounted, before it
	// deploys the image (kairos-agent pkg/action upgrade.go, upgradeHook(BeforeUpgradeHook)).
	// Its Hook drops the stage's error unless the configuration is strict
	// (pkg/action/hook.go: "if !config.Strict { err = nil }"): a failing step, such as a
	// snapshot the store refused, is only logged and the upgrade goes on.
	if err := n.runStage(ctx, p, cloudconfig.StageBeforeUpgrade); err != nil {
		if p.strict {
			err = fmt.Errorf("kairos-agent upgrade (strict): the before-upgrade hook failed: %w", err)
			n.mu.Lock()
			n.lastUpgrade = err
			n.mu.Unlock()
			return err
		}
		n.reg.log.Info("before-upgrade hook failed; kairos-agent goes on (not strict)", "providerID", n.spec.ProviderID, "error", err.Error())
	}
	n.upgrades.Add(1)
	n.mu.Lock()
	n.images.passive, n.images.active = n.images.running, ref
	n.mu.Unlock()
	n.afterUpgrade(p)
	err := n.reboot(ctx)
	n.mu.Lock()
	n.lastUpgrade = err
	n.mu.Unlock()
	return err
}

// LastUpgrade is how the node's last upgrade of its active system ended (Upgrade's result): what
// the node itself knows, its journal, which the Kairos operator does not report.
func (n *Node) LastUpgrade() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastUpgrade
}

// Upgrades counts the upgrades of the active system the node ran: each wrote an image and
// rebooted the node.
func (n *Node) Upgrades() int { return int(n.upgrades.Load()) }

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

// Reboot reboots the node: GRUB's boot assessment picks the entry, as at any boot.
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
// the etcd member process of a control-plane node) and boots it again: GRUB picks the active or
// the fallback entry (grubSelect), a boot that fails before userspace comes back to GRUB, and the
// document's verify step may reboot an armed boot whose distribution does not get ready.
func (n *Node) reboot(ctx context.Context) error {
	active, passive := n.Images()
	n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonRebooting, Message: "rebooting into " + active})
	n.shutdownForReboot()
	var failed *BootFailure
	for {
		if n.grubSelect() {
			return n.bootFallback(ctx, active, passive, failed)
		}
		f, err := n.bootActive(ctx, active, passive)
		if f == nil {
			return err
		}
		failed = f
	}
}

// bootActive boots the active entry. It returns a *BootFailure when the machine rebooted (back
// to GRUB), otherwise nil and the boot's outcome: nil when the distribution is up, a
// *DistributionFailure or a refusal when the node stays on the image without it, another error
// when the cluster did not answer in time (not the image's fault: the node is up on the image).
func (n *Node) bootActive(ctx context.Context, active, passive string) (*BootFailure, error) {
	img, err := ParseImage(active)
	if err == nil && n.reg.imageBroken(active) {
		err = fmt.Errorf("the image %s does not boot (kernel panic during boot; simulated with Registry.BreakImage)", active)
	}
	if err != nil {
		// panic=5: the kernel reboots the machine, back to GRUB.
		n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonImageBroken, Message: err.Error() + "; the machine reboots"})
		if err := sleepCtx(ctx, BootAssessmentPeriod); err != nil {
			return nil, err
		}
		n.mu.Lock()
		enabled := n.grub.enable
		n.mu.Unlock()
		if !enabled {
			n.setStatus(Status{Phase: PhaseRefused, Reason: ReasonImageBroken, Message: err.Error() + "; boot assessment is not enabled (no upgrade pending), so GRUB boots it again: the machine reboots in a loop"})
			return nil, refuse(ReasonImageBroken, "%v; boot assessment is not enabled, the machine reboots into it again and again", err)
		}
		return &BootFailure{Image: active, Fallback: passive, Reason: ReasonImageBroken, Message: err.Error()}, nil
	}
	n.mu.Lock()
	p := n.plan
	n.mu.Unlock()
	from := n.bootOS(img)
	armed := n.bootedActive(p)
	err = n.startDistribution(ctx, p, img, from)
	if err == nil {
		n.distributionReady(p)
		return nil, nil
	}
	var r *refusal
	if !errors.As(err, &r) {
		return nil, err
	}
	if !armed || !p.bootAssessmentSteps().verify {
		msg := r.err.Error() + "; the image booted, so boot assessment counted it good and nothing falls back: the node stays on " + active + " without " + serviceOf(p)
		if armed {
			// An arm step without the verify step: nothing reboots, the next reboot falls back.
			msg += " (GRUB's variables stay armed: its next reboot boots the fallback image)"
		}
		n.setStatus(Status{Phase: PhaseRefused, Reason: r.reason, Message: msg})
		return nil, &DistributionFailure{Image: active, Reason: r.reason, Message: r.err.Error()}
	}
	// The document's verify step waits for the distribution, then reboots; GRUB finds both
	// variables the arm step set.
	n.setStatus(Status{Phase: PhaseBooting, Reason: r.reason, Message: r.err.Error() + "; the boot assessment's verify step reboots into the fallback image " + passive + " when its timeout passes"})
	if err := sleepCtx(ctx, VerifyTimeout); err != nil {
		return nil, err
	}
	n.shutdownForReboot()
	return &BootFailure{Image: active, Fallback: passive, Reason: r.reason, Message: r.err.Error()}, nil
}

// bootFallback boots GRUB's fallback entry, the passive image, after failed (nil when GRUB
// chose the fallback without trying the active image: variables left set by an earlier failure).
func (n *Node) bootFallback(ctx context.Context, active, passive string, failed *BootFailure) error {
	if failed == nil {
		failed = &BootFailure{Image: active, Fallback: passive, Reason: ReasonPreviousBootFailed,
			Message: "GRUB's boot assessment variables are still set from an earlier failed boot, so it booted the fallback entry without trying " + active}
	}
	if passive == "" {
		n.setStatus(Status{Phase: PhaseRefused, Reason: failed.Reason, Message: failed.Message + "; no passive image to fall back to"})
		return failed
	}
	n.setStatus(Status{Phase: PhaseBooting, Reason: failed.Reason, Message: failed.Message + "; boot assessment falls back to " + passive})
	img, err := ParseImage(passive)
	if err == nil && n.reg.imageBroken(passive) {
		err = fmt.Errorf("the image %s does not boot either", passive)
	}
	if err == nil {
		n.mu.Lock()
		p := n.plan
		n.mu.Unlock()
		from := n.bootOS(img)
		n.bootedFallback()
		if err = n.startDistribution(ctx, p, img, from); err == nil {
			n.distributionReady(p)
			return failed
		}
	}
	n.setStatus(Status{Phase: PhaseRefused, Reason: ReasonStartFailed, Message: fmt.Sprintf("the fallback image %s did not come up either: %v", passive, err)})
	return fmt.Errorf("%w; the fallback failed too: %v", failed, err)
}

// sleepCtx waits d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// rebootStopGrace is how long a rebooting node's etcd gets to stop on SIGTERM: a reboot stops
// services the way systemd does, SIGTERM first and SIGKILL only after the unit's stop timeout
// (90 s by default, systemd.service TimeoutStopSec); etcd needs far less.
const rebootStopGrace = 10 * time.Second

// shutdownForReboot stops the node's kubelet, its part in the virtual IP and its etcd process; the
// member's data directory, certificates and membership stay. etcd stops as in a reboot, on
// SIGTERM, so a leader hands its leadership over before it goes.
func (n *Node) shutdownForReboot() {
	n.stopKubelet()
	n.dropVIP()
	if e := n.etcdServer(); e != nil {
		e.shutdown(rebootStopGrace)
	}
}

// bootOS is an image's userspace coming up: its /etc/kairos-release and /etc/os-release, the
// distribution version it ships ("" when it ships another distribution). It returns the version
// the distribution last ran with, which the version skew policy compares the image's with.
func (n *Node) bootOS(img Image) (from string) {
	n.writeRelease(img)
	n.mu.Lock()
	defer n.mu.Unlock()
	from = n.dataVersion
	if from == "" {
		from = n.installed
	}
	n.images.running = img.Ref
	n.installed = img.Version
	if n.plan != nil && img.Distribution != n.plan.distribution {
		n.installed = ""
	}
	return from
}

// startDistribution starts the distribution of a booted image: the checks its start runs (the
// image ships the distribution; the document's preflight, as the unit's ExecStartPre; the version
// skew from the version it last ran), then the etcd member with its data, the kubelet with the
// new version.
func (n *Node) startDistribution(ctx context.Context, p *plan, img Image, from string) error {
	ref := img.Ref
	n.mu.Lock()
	c := n.cluster
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

	n.mu.Lock()
	n.dataVersion = img.Version
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
	vars := n.kairosRelease()
	return vars["KAIROS_VERSION"] + "-" + vars["KAIROS_SOFTWARE_VERSION_PREFIX"] + vars["KAIROS_SOFTWARE_VERSION"]
}

// kairosRelease reads /etc/kairos-release of the booted image.
func (n *Node) kairosRelease() map[string]string {
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
	return vars
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
	n.afterUpgrade(p)
	n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonRebooting, Message: fmt.Sprintf("upgraded from %s to the document's image %s, rebooting into it", from, want)})
	// GRUB's boot assessment at the reboot, and at the one after a boot that fails before
	// userspace (bootassessment.go).
	fallback := n.grubSelect()
	if !fallback && n.reg.imageBroken(want) {
		time.Sleep(BootAssessmentPeriod)
		fallback = n.grubSelect()
	}
	if fallback {
		n.bootedFallback()
		return "", refuse(ReasonImageBroken, "the document's image %s does not boot; boot assessment fell back to %s, where the image step does not upgrade again and the preflight keeps %s stopped", want, from, serviceOf(p))
	}
	n.bootOS(img)
	n.bootedActive(p)
	n.imageReboots.Add(1)
	return img.Version, nil
}

// ImageReboots counts the reboots the document's image step caused.
func (n *Node) ImageReboots() int { return int(n.imageReboots.Load()) }
