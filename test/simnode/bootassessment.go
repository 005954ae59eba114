package simnode

import (
	"os"
	"strings"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// Kairos' boot assessment, as the simulation applies it at every boot of a node.
//
// The rules are Kairos' own (kairos-io/kairos overlay/files/system/oem/08_grub.yaml, and the
// boot assessment page of the Kairos docs, kairos-io/kairos-docs
// content/en/docs/Upgrade/boot_assessment.md), not kairos-capi's:
//
//   - an upgrade's after-upgrade stage sets enable_boot_assessment=yes in COS_STATE's
//     boot_assessment GRUB environment (Node.Upgrade, the document's image step);
//   - at every boot GRUB reads it: enable and boot_assessment_tentative both set boot the
//     fallback (passive) entry with upgrade_failure on the kernel command line; enable alone
//     saves tentative=yes and boots the active entry (grubSelect);
//   - the first boot.before step of a system booted from active.img clears both variables:
//     userspace came up, the boot counts as good (bootedActive). A booted fallback entry clears
//     nothing, so GRUB keeps booting the fallback until someone clears the variables (the
//     Kairos docs' maintenance advice; ClearBootAssessment);
//   - a boot that fails before userspace (kernel panic with panic=5, systemd crash with
//     crash_reboot: Registry.BreakImage) reboots the machine after BootAssessmentPeriod, back to
//     GRUB; without enable set GRUB boots the same image again, forever.
//
// What a k0s or k3s that fails later does is up to the document: without steps of its own the
// node stays on the image without Kubernetes (DistributionFailure). kairos-capi's documents
// (common/render bootassessment.go) carry two steps the simulation recognises by their paths
// and commands, not by their logic (bootAssessmentSteps): "arm" in boot.before sets both
// variables again on the first boots of a release other than the verified one; "verify",
// started in the network stage, records the release once the distribution is ready and clears
// the variables, or reboots an armed boot after its timeout (VerifyTimeout here), which sends
// GRUB to the fallback entry.

// grubEnv is the boot assessment state in COS_STATE's boot_assessment file.
type grubEnv struct{ enable, tentative bool }

// BootAssessment is a node's boot assessment state.
type BootAssessment struct {
	// Enable and Tentative are GRUB's enable_boot_assessment and boot_assessment_tentative.
	Enable, Tentative bool
	// Armed tells that the document's arm step armed GRUB during the node's last boot (only a
	// boot of the active image arms).
	Armed bool
	// UpgradeFailure tells that the node's last boot was GRUB's fallback entry (upgrade_failure
	// on the kernel command line).
	UpgradeFailure bool
	// VerifiedRelease is what the document's verify step last recorded
	// (render.VerifiedReleaseFile), "" when nothing was.
	VerifiedRelease string
}

// BootAssessment returns the node's boot assessment state.
func (n *Node) BootAssessment() BootAssessment {
	verified, _ := os.ReadFile(n.hostPath(render.VerifiedReleaseFile))
	n.mu.Lock()
	defer n.mu.Unlock()
	return BootAssessment{
		Enable: n.grub.enable, Tentative: n.grub.tentative, Armed: n.armed, UpgradeFailure: n.upgradeFailure,
		VerifiedRelease: strings.TrimSpace(string(verified)),
	}
}

// ClearBootAssessment clears GRUB's boot assessment variables, as an operator does on a node
// that booted its fallback entry (the maintenance advice of Kairos' boot assessment docs):
// otherwise GRUB keeps booting the fallback entry, also after the next upgrade.
func (n *Node) ClearBootAssessment() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.grub = grubEnv{}
}

// grubSelect applies GRUB's rule at one boot and tells whether it boots the fallback entry.
func (n *Node) grubSelect() (fallback bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.grub.enable {
		return false
	}
	if n.grub.tentative {
		return true
	}
	n.grub.tentative = true
	return false
}

// afterUpgrade is the after-upgrade stage: Kairos' step sets enable_boot_assessment=yes, then
// the document's upgrade step, when it has one, clears boot_assessment_tentative.
func (n *Node) afterUpgrade(p *plan) {
	clear := p.bootAssessmentSteps().upgrade
	n.mu.Lock()
	defer n.mu.Unlock()
	n.grub.enable = true
	if clear {
		n.grub.tentative = false
	}
}

// bootedFallback records a boot of the fallback entry: upgrade_failure on the command line,
// which 08_grub.yaml turns into /run/cos/upgrade_failure; the variables stay as they are.
func (n *Node) bootedFallback() {
	_ = n.writeFile("/run/cos/upgrade_failure", "1")
	n.mu.Lock()
	defer n.mu.Unlock()
	n.upgradeFailure, n.armed = true, false
}

// bootedActive is the boot.before stage of a boot of active.img whose userspace came up:
// 08_grub.yaml clears both variables, then the document's arm step (when it has one) arms
// again for a release that was not verified. It returns whether it armed. The node's
// /etc/kairos-release must be the booted image's already.
func (n *Node) bootedActive(p *plan) bool {
	_ = os.Remove(n.hostPath("/run/cos/upgrade_failure"))
	arm := p.bootAssessmentSteps().arm
	verified, _ := os.ReadFile(n.hostPath(render.VerifiedReleaseFile))
	armed := arm && len(verified) > 0 && strings.TrimSpace(string(verified)) != n.runningRelease()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.grub = grubEnv{enable: armed, tentative: armed}
	n.armed, n.upgradeFailure = armed, false
	return armed
}

// distributionReady is the document's verify step once the distribution is ready: it records
// the running release and, on the active entry, clears the variables (on the fallback entry
// they are what keeps GRUB away from the image that failed).
func (n *Node) distributionReady(p *plan) {
	if !p.bootAssessmentSteps().verify {
		return
	}
	_ = n.writeFile(render.VerifiedReleaseFile, n.runningRelease()+"\n")
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.upgradeFailure {
		n.grub = grubEnv{}
	}
}

// assessmentSteps are the document's boot assessment steps, as far as the simulation
// recognises them.
type assessmentSteps struct {
	// arm: a boot.before command runs render.BootAssessmentScript with "arm", and the script
	// sets both GRUB variables (grub2-editenv) on active.img.
	arm bool
	// verify: a network command starts render.BootAssessmentUnit, whose ExecStart runs the
	// script with "verify", and the script records render.VerifiedReleaseFile and can reboot.
	verify bool
	// upgrade: an after-upgrade command runs the script with "upgrade", and the script clears
	// boot_assessment_tentative (grub2-editenv).
	upgrade bool
}

// bootAssessmentSteps reads the document's boot assessment steps.
func (p *plan) bootAssessmentSteps() assessmentSteps {
	script, ok := p.files[render.BootAssessmentScript]
	if !ok {
		return assessmentSteps{}
	}
	runs := func(stage, what string) bool {
		for _, c := range p.stageCommands[stage] {
			if f := strings.Fields(c); len(f) == 3 && f[1] == render.BootAssessmentScript && f[2] == what {
				return true
			}
		}
		return false
	}
	var s assessmentSteps
	s.arm = runs("boot.before", "arm") && strings.Contains(script, "active.img") && strings.Contains(script, "grub2-editenv") &&
		strings.Contains(script, "enable_boot_assessment=") && strings.Contains(script, "boot_assessment_tentative=")
	started := false
	for _, c := range p.stageCommands["network"] {
		if strings.Contains(c, "systemctl start") && strings.Contains(c, render.BootAssessmentUnit) {
			started = true
		}
	}
	s.upgrade = runs(cloudconfig.StageAfterUpgrade, "upgrade") && strings.Contains(script, "\nupgrade)\n") &&
		strings.Contains(script, `grub2-editenv "$grubenv" set boot_assessment_tentative=`+"\n")
	unit := p.files[render.BootAssessmentUnitPath]
	s.verify = started && strings.Contains(unit, "ExecStart=/bin/sh "+render.BootAssessmentScript+" verify") &&
		strings.Contains(script, render.VerifiedReleaseFile) && strings.Contains(script, "reboot")
	return s
}
