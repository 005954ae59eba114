package render

import (
	"strconv"
	"strings"
	"time"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
)

// Boot assessment of new Kairos images, extended to the distribution.
//
// What Kairos does by itself (kairos-io/kairos overlay/files/system/oem/08_grub.yaml, and the
// boot assessment page of the Kairos docs, kairos-io/kairos-docs
// content/en/docs/Upgrade/boot_assessment.md): the after-upgrade stage sets the GRUB
// environment variable enable_boot_assessment=yes in the boot_assessment file of COS_STATE.
// At each boot GRUB reads that file: with enable=yes and boot_assessment_tentative=yes it
// boots the fallback (passive) entry and adds upgrade_failure to its command line; with
// enable=yes alone it saves tentative=yes and boots the active entry. The first boot.before
// stage of a system booted from active.img clears both variables. A boot therefore counts as
// good as soon as userspace runs that stage; only failures that reboot the machine before it
// (kernel panic with panic=5, rd.emergency=reboot, systemd.crash_reboot) fall back. A k0s or
// k3s that does not start on the new image, minutes later, leaves the node on that image
// without Kubernetes.
//
// What the document adds: "arm", a boot.before step, sets both variables again on the first
// boots of a Kairos release that differs from the last verified one, so that any reboot
// before verification boots the fallback entry; "verify", a unit the network stage starts
// without waiting (as the bootstrap unit), waits for the distribution to be ready, then
// records the release and clears the variables, or, when it armed this boot and the
// distribution is not ready within BootAssessmentTimeout, reboots: GRUB then finds both
// variables set and boots the fallback image with upgrade_failure on its command line.
//
// Why boot.before: kairos-agent runs every stage over /system/oem, then /oem, then
// /usr/local/cloud-config (its cloud-init paths), and yip finishes one source before it
// starts the next, so our step in /oem runs right after 08_grub's clearing step of the same
// stage; arming there leaves the shortest window in which a crash would reboot into the new
// image unassessed. (Even then the next boot arms again: the release still differs.)
//
// What the document adds for upgrades: "upgrade", an after-upgrade step, clears
// boot_assessment_tentative once Kairos' own after-upgrade step has set enable_boot_assessment
// (08_grub.yaml sets enable only). Without it a tentative=yes left by an earlier failure (a
// boot of the fallback entry leaves both variables set; so does an upgrade during an armed,
// not yet verified boot) makes GRUB boot the fallback entry at the reboot into the new image
// without ever trying it: after a fallback, every later upgrade would "fail" the same way until
// someone cleared the variables on the node by hand (the docs' maintenance advice). With it, the
// new image gets exactly the one try an upgrade gives it, assessed as any other.
//
// Not armed: on the first boot ever (no verified release: there is nothing to fall back to
// that was known to work, and the image step has its own guard), on a reboot of a verified
// release, on the fallback entry (no active.img on the command line: the variables Kairos
// left set keep GRUB on the fallback until someone clears them), and where COS_STATE has no
// GRUB boot assessment hook (trusted boot / UKI installations have none; a reboot would only
// boot the same image again). An unarmed verify never reboots: it waits as long as it takes
// and records the release once the distribution is ready.

// BootAssessmentTimeout is how long "verify" waits on an armed boot for the distribution to be
// ready before it reboots into the fallback image. Ten minutes: a k3s server or k0s controller
// that comes back from an OS upgrade restarts etcd, may migrate its datastore for a new minor
// and waits for its etcd peers; systemd restarts a failing k0s/k3s unit every few seconds, so
// transient failures (a peer still rebooting, the network coming up late) are retried within
// that window. A normal start takes a few minutes at most on slow edge hardware; ten minutes
// leaves a wide margin before a healthy node is sent back, and still bounds the time a broken
// image keeps a Machine without Kubernetes to about ten minutes and two boots.
const BootAssessmentTimeout = 10 * time.Minute

// Step names of the boot assessment.
const (
	stepAssessArm     = "kairos-capi boot assessment arm"
	stepAssessVerify  = "kairos-capi boot assessment verify"
	stepAssessUpgrade = "kairos-capi boot assessment upgrade"
)

// bootAssessmentArmStep is the boot.before step: it writes the script (the files of this step
// are written before its commands run, and the boot stage's files come later) and arms. The
// script itself checks for active.img, so the file is current on every normal boot.
func (b *builder) bootAssessmentArmStep() cloudconfig.Step {
	return cloudconfig.Step{
		Name:        stepAssessArm,
		If:          notInstallerOrRecovery,
		Directories: []cloudconfig.Directory{{Path: ScriptDir, Permissions: 0o755}},
		Files:       []cloudconfig.File{{Path: BootAssessmentScript, Permissions: 0o755, Content: EscapeTemplates(b.bootAssessmentScript())}},
		Commands:    []string{"/bin/sh " + BootAssessmentScript + " arm"},
	}
}

// bootAssessmentVerifyStep starts the verify unit without waiting for it: it waits for the
// distribution, which the Kairos agent starts only after the network stage has finished.
func bootAssessmentVerifyStep() cloudconfig.Step {
	return cloudconfig.Step{
		Name:     stepAssessVerify,
		If:       notInstallerOrRecovery,
		Commands: []string{"systemctl start --no-block " + BootAssessmentUnit},
	}
}

// bootAssessmentUpgradeStep gives the image an upgrade wrote its try (see the top of this file).
// The script is there: the arm step writes it at every boot of an installed system, and
// kairos-agent runs after-upgrade on the running system.
func bootAssessmentUpgradeStep() cloudconfig.Step {
	return cloudconfig.Step{
		Name:     stepAssessUpgrade,
		If:       notInstallerOrRecovery + " && [ -e " + BootAssessmentScript + " ]",
		Commands: []string{"/bin/sh " + BootAssessmentScript + " upgrade"},
	}
}

func (b *builder) bootAssessmentUnit() string {
	return "[Unit]\n" +
		"Description=Boot assessment of the running Kairos image: " + b.service + " ready (kairos-capi, cluster " + b.n.ClusterName + ")\n" +
		"\n" +
		"[Service]\n" +
		"Type=oneshot\n" +
		"RemainAfterExit=yes\n" +
		// The script bounds an assessed boot itself (BootAssessmentTimeout).
		"TimeoutStartSec=infinity\n" +
		"ExecStart=/bin/sh " + BootAssessmentScript + " verify\n"
}

// bootAssessmentScript is "arm", "verify" and "upgrade" (see the top of this file). It prints releases and
// image names only; nothing of the bootstrap data.
func (b *builder) bootAssessmentScript() string {
	svc := b.service
	var s strings.Builder
	s.Grow(3072)
	s.WriteString(b.header("Boot assessment of new Kairos images: arm (boot.before) keeps GRUB on the fallback image until verify (" + BootAssessmentUnit + ") saw " + svc + " ready."))
	s.WriteString("state=" + CosStateDir + "\n")
	s.WriteString("grubenv=" + BootAssessmentEnv + "\n")
	s.WriteString("verified_file=" + VerifiedReleaseFile + "\n")
	s.WriteString("armed=" + BootAssessmentArmedMarker + "\n")
	s.WriteString("timeout=" + strconv.Itoa(int(BootAssessmentTimeout/time.Second)) + "\n")
	s.WriteString(runningRelease)
	s.WriteString("image=$( . /etc/kairos-release 2>/dev/null; echo \"${KAIROS_IMAGE_REPO:-$running}\")\n")
	s.WriteString("verified=$(cat \"$verified_file\" 2>/dev/null)\n")
	s.WriteString("booted_active() { grep -q active.img /proc/cmdline; }\n")
	// Both variables at once, as 08_grub.yaml clears them: COS_STATE is mounted read-only.
	s.WriteString("set_grubenv() {\n")
	s.WriteString("  mount -o rw,remount \"$state\" || return 1\n")
	s.WriteString("  grub2-editenv \"$grubenv\" set \"enable_boot_assessment=$1\" && grub2-editenv \"$grubenv\" set \"boot_assessment_tentative=$1\"\n")
	s.WriteString("  rc=$?\n")
	s.WriteString("  mount -o ro,remount \"$state\"\n")
	s.WriteString("  return $rc\n}\n")
	s.WriteString("case \"$1\" in\n")

	s.WriteString("arm)\n")
	s.WriteString("  booted_active || exit 0\n")
	s.WriteString("  [ -n \"$verified\" ] || exit 0\n")
	s.WriteString("  [ \"$running\" != \"$verified\" ] || exit 0\n")
	s.WriteString("  if [ ! -e " + BootAssessmentGrubHook + " ]; then\n")
	s.WriteString("    echo \"kairos-capi: first boot of Kairos release $running (last verified: $verified), but COS_STATE has no GRUB boot assessment: not armed, " + svc + " failing here would not fall back\" >&2\n")
	s.WriteString("    exit 0\n  fi\n")
	s.WriteString("  if ! set_grubenv yes; then\n")
	s.WriteString("    echo \"kairos-capi: could not arm the boot assessment of Kairos release $running\" >&2\n    exit 1\n  fi\n")
	s.WriteString("  mkdir -p " + BootAssessmentArmedMarker[:strings.LastIndexByte(BootAssessmentArmedMarker, '/')] + " && touch \"$armed\"\n")
	s.WriteString("  echo \"kairos-capi: boot assessment armed for Kairos release $running (last verified: $verified): until " + svc + " is ready, a reboot boots the fallback image\"\n")
	s.WriteString("  ;;\n")

	s.WriteString("verify)\n")
	s.WriteString("  deadline=\n")
	s.WriteString("  if [ -e \"$armed\" ]; then\n")
	s.WriteString("    deadline=$(( $(date +%s) + timeout ))\n")
	s.WriteString("    echo \"kairos-capi: boot assessment: waiting up to ${timeout}s for " + svc + " on Kairos release $running\"\n  fi\n")
	s.WriteString("  until systemctl is-active --quiet " + svc + " && " + b.readyCheck() + "; do\n")
	s.WriteString("    if [ -n \"$deadline\" ] && [ \"$(date +%s)\" -ge \"$deadline\" ]; then\n")
	s.WriteString("      echo \"kairos-capi: boot assessment failed: " + svc + " is not ready ${timeout}s after booting the Kairos image $image (release $running); rebooting, GRUB boots the fallback image (last verified release: $verified)\" >&2\n")
	s.WriteString("      reboot\n      exit 1\n    fi\n")
	s.WriteString("    sleep 5\n  done\n")
	s.WriteString("  if [ \"$running\" != \"$verified\" ]; then\n")
	s.WriteString("    echo \"$running\" > \"$verified_file.new\" && mv -f \"$verified_file.new\" \"$verified_file\" || exit 1\n  fi\n")
	// Cleared on the active entry only: on the fallback entry the variables are what keeps GRUB
	// away from the image that failed.
	s.WriteString("  if [ -e \"$armed\" ] || { booted_active && grub2-editenv \"$grubenv\" list 2>/dev/null | grep -q -e '^enable_boot_assessment=yes$' -e '^boot_assessment_tentative=yes$'; }; then\n")
	s.WriteString("    set_grubenv \"\" || { echo \"kairos-capi: could not clear the boot assessment variables\" >&2; exit 1; }\n")
	s.WriteString("    rm -f \"$armed\"\n  fi\n")
	s.WriteString("  echo \"kairos-capi: Kairos release $running verified: " + svc + " is ready\"\n")
	s.WriteString("  ;;\n")

	s.WriteString("upgrade)\n")
	s.WriteString("  [ -e " + BootAssessmentGrubHook + " ] || exit 0\n")
	s.WriteString("  mount -o rw,remount \"$state\" || exit 1\n")
	s.WriteString("  grub2-editenv \"$grubenv\" set boot_assessment_tentative=\n")
	s.WriteString("  rc=$?\n")
	s.WriteString("  mount -o ro,remount \"$state\"\n")
	s.WriteString("  [ $rc -eq 0 ] || { echo \"kairos-capi: could not clear boot_assessment_tentative: GRUB may boot the fallback image without trying the new one\" >&2; exit 1; }\n")
	s.WriteString("  echo \"kairos-capi: boot assessment: the new image is tried at the next boot (boot_assessment_tentative cleared)\"\n")
	s.WriteString("  ;;\n")

	s.WriteString("*)\n  echo \"usage: $0 arm|verify|upgrade\" >&2\n  exit 2\n  ;;\nesac\n")
	return s.String()
}
