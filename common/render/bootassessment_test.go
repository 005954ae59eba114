package render

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
)

// TestBootAssessmentSteps pins where the boot assessment sits in every document: the arm step
// alone in boot.before (after Kairos' 08_grub.yaml clearing step, which /system/oem holds),
// writing its script and running "arm"; the verify unit written with the other units and
// started without blocking as the network stage's last step; neither on the installer or in
// recovery.
func TestBootAssessmentSteps(t *testing.T) {
	p := fixturePKI(t)
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := mustRender(t, tc.node(t, p))
			before := c.Stages["boot.before"]
			if names := c.Stages.StageNames(); names[0] != "boot.before" || len(before) != 1 {
				t.Fatalf("stages %v, boot.before %+v", names, before)
			}
			arm := before[0]
			if arm.Name != stepAssessArm || arm.If != notInstallerOrRecovery {
				t.Errorf("arm step %q if %q", arm.Name, arm.If)
			}
			if len(arm.Files) != 1 || arm.Files[0].Path != BootAssessmentScript || arm.Files[0].Permissions != 0o755 {
				t.Errorf("arm step files %+v", arm.Files)
			}
			if !slices.Equal(arm.Commands, []string{"/bin/sh " + BootAssessmentScript + " arm"}) {
				t.Errorf("arm step commands %q", arm.Commands)
			}
			network := c.Stages[cloudconfig.StageNetwork]
			last := network[len(network)-1]
			if last.Name != stepAssessVerify || last.If != notInstallerOrRecovery ||
				!slices.Equal(last.Commands, []string{"systemctl start --no-block " + BootAssessmentUnit}) {
				t.Errorf("verify step %+v", last)
			}
			// The bootstrap step reloads systemd (it knows the unit file then) before.
			if network[len(network)-2].Name != stepBootstrap {
				t.Errorf("the verify step does not follow the bootstrap step: %+v", network)
			}
			files := allFiles(c)
			unit := files[BootAssessmentUnitPath].Content
			for _, want := range []string{"Type=oneshot\n", "TimeoutStartSec=infinity\n", "ExecStart=/bin/sh " + BootAssessmentScript + " verify\n"} {
				if !strings.Contains(unit, want) {
					t.Errorf("verify unit lacks %q:\n%s", want, unit)
				}
			}
			upgrade := c.Stages[cloudconfig.StageAfterUpgrade]
			if len(upgrade) != 1 || upgrade[0].Name != stepAssessUpgrade || upgrade[0].If != notInstallerOrRecovery+" && [ -e "+BootAssessmentScript+" ]" ||
				!slices.Equal(upgrade[0].Commands, []string{"/bin/sh " + BootAssessmentScript + " upgrade"}) {
				t.Errorf("after-upgrade steps %+v", upgrade)
			}
			if files[BootAssessmentUnitPath].Permissions != 0o644 {
				t.Errorf("verify unit mode %v", files[BootAssessmentUnitPath].Permissions)
			}
			script := arm.Files[0].Content
			svc := ServiceName(tc.node(t, p).Distribution, tc.node(t, p).Role)
			for _, want := range []string{
				"timeout=600\n",
				"grep -q active.img /proc/cmdline",
				"grub2-editenv \"$grubenv\" set \"enable_boot_assessment=$1\" && grub2-editenv \"$grubenv\" set \"boot_assessment_tentative=$1\"",
				"mount -o rw,remount \"$state\"",
				"mount -o ro,remount \"$state\"",
				"until systemctl is-active --quiet " + svc + " && ",
				"      reboot\n",
			} {
				if !strings.Contains(script, want) {
					t.Errorf("script lacks %q", want)
				}
			}
			if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("the script is not valid sh: %v %s", err, out)
			}
		})
	}
}

// bootAssessmentSandbox runs the script of a k3s agent against a scratch root: the paths it
// touches are moved below the root, and the commands it needs from the system are stubs that
// keep their state there (GRUB's environment file refuses writes while COS_STATE is mounted
// read-only; the clock advances five minutes per reading; sleep returns at once).
type bootAssessmentSandbox struct {
	t      *testing.T
	root   string
	script string
}

func newBootAssessmentSandbox(t *testing.T) *bootAssessmentSandbox {
	t.Helper()
	p := fixturePKI(t)
	n := node(K3s, RoleWorker)
	setK3sTokens(t, p, &n)
	files := allFiles(mustRender(t, n))
	script := files[BootAssessmentScript].Content
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	for _, d := range []string{bin, filepath.Join(root, "cos-state"), filepath.Join(root, "lib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range [][2]string{
		{CosStateDir, root + "/cos-state"},
		{ScriptDir, root + "/lib"},
		{"/run/kairos-capi", root + "/run"},
		{"/etc/kairos-release", root + "/kairos-release"},
		{"/proc/cmdline", root + "/cmdline"},
		{"/var/lib/rancher/k3s/agent/kubelet.kubeconfig", root + "/kubeconfig"},
		{strings.TrimSuffix(scriptPath, "\n"), "PATH=" + bin + ":/usr/bin:/bin"},
	} {
		if !strings.Contains(script, r[0]) {
			t.Fatalf("the script no longer mentions %s", r[0])
		}
		script = strings.ReplaceAll(script, r[0], r[1])
	}
	stubs := map[string]string{
		"mount": `case "$2" in rw,remount) echo rw > ROOT/mounted ;; ro,remount) echo ro > ROOT/mounted ;; esac`,
		"grub2-editenv": `f=$1; cmd=$2; shift 2
case "$cmd" in
set)
  [ "$(cat ROOT/mounted 2>/dev/null)" = rw ] || { echo "$f: read-only file system" >&2; exit 1; }
  for kv in "$@"; do
    { grep -v "^${kv%%=*}=" "$f" 2>/dev/null; echo "$kv"; } > "$f.tmp" && mv "$f.tmp" "$f"
  done ;;
list) cat "$f" ;;
esac`,
		"systemctl": `[ "$1" = is-active ] && [ -e ROOT/active ]`,
		"date":      `t=$(cat ROOT/clock 2>/dev/null || echo 1000); echo $((t + 300)) > ROOT/clock; echo "$t"`,
		"sleep":     `:`,
		"reboot":    `touch ROOT/rebooted`,
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+strings.ReplaceAll(body, "ROOT", root)+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &bootAssessmentSandbox{t: t, root: root, script: script}
}

// boot sets what the node booted: the command line's image, the release, the verified
// release ("" for none) and GRUB's variables; clearing what a boot resets (/run, the clock).
func (s *bootAssessmentSandbox) boot(img, release, verified, grubenv string, hook bool) {
	s.t.Helper()
	_ = os.RemoveAll(filepath.Join(s.root, "run"))
	for _, f := range []string{"rebooted", "clock", "active", "kubeconfig", "mounted"} {
		_ = os.Remove(filepath.Join(s.root, f))
	}
	v, dist, _ := strings.Cut(release, "-k3s")
	s.write("cmdline", "BOOT_IMAGE=/boot/vmlinuz console=tty1 root=LABEL=COS_STATE cos-img/filename=/cOS/"+img+" panic=5\n")
	s.write("kairos-release", "KAIROS_VERSION=\""+v+"\"\nKAIROS_SOFTWARE_VERSION_PREFIX=\"k3s\"\nKAIROS_SOFTWARE_VERSION=\""+dist+"\"\nKAIROS_IMAGE_REPO=\"quay.io/kairos/ubuntu:test-"+v+"\"\n")
	if verified == "" {
		_ = os.Remove(filepath.Join(s.root, "lib/verified-release"))
	} else {
		s.write("lib/verified-release", verified+"\n")
	}
	s.write("cos-state/boot_assessment", grubenv)
	if hook {
		s.write("cos-state/grub_boot_assessment", "# hook\n")
	} else {
		_ = os.Remove(filepath.Join(s.root, "cos-state/grub_boot_assessment"))
	}
}

// ready makes the distribution active and serving.
func (s *bootAssessmentSandbox) ready() {
	s.write("active", "")
	s.write("kubeconfig", "x")
}

func (s *bootAssessmentSandbox) write(name, content string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.root, name), []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *bootAssessmentSandbox) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.root, name))
	return string(b)
}

func (s *bootAssessmentSandbox) exists(name string) bool {
	_, err := os.Stat(filepath.Join(s.root, name))
	return err == nil
}

func (s *bootAssessmentSandbox) run(mode string) (string, error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", s.script, "boot-assessment.sh", mode).CombinedOutput()
	return string(out), err
}

// grubenv returns GRUB's variables as "enable,tentative".
func (s *bootAssessmentSandbox) grubenv() string {
	vars := map[string]string{}
	for _, l := range strings.Split(s.read("cos-state/boot_assessment"), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	return vars["enable_boot_assessment"] + "," + vars["boot_assessment_tentative"]
}

// TestBootAssessmentScript runs arm, verify and upgrade through the boots that matter, with sh (dash
// here, as on Debian-based images).
func TestBootAssessmentScript(t *testing.T) {
	const old, next = "v3.5.0-k3sv1.31.2+k3s1", "v3.5.1-k3sv1.32.0+k3s1"
	// 08_grub.yaml leaves both variables empty on a good boot of active.img.
	const cleared = "enable_boot_assessment=\nboot_assessment_tentative=\n"
	s := newBootAssessmentSandbox(t)

	t.Run("first boot ever: verify records, nothing is armed", func(t *testing.T) {
		s.boot("active.img", old, "", cleared, true)
		if out, err := s.run("arm"); err != nil || s.grubenv() != "," || s.exists("run/boot-assessment.armed") {
			t.Fatalf("arm: %v %s; grubenv %q", err, out, s.grubenv())
		}
		s.ready()
		if out, err := s.run("verify"); err != nil || strings.TrimSpace(s.read("lib/verified-release")) != old {
			t.Fatalf("verify: %v %s; verified %q", err, out, s.read("lib/verified-release"))
		}
		if s.grubenv() != "," || s.exists("rebooted") {
			t.Errorf("grubenv %q, rebooted %v", s.grubenv(), s.exists("rebooted"))
		}
	})

	t.Run("new release, ready: armed, then verified and cleared", func(t *testing.T) {
		s.boot("active.img", next, old, cleared, true)
		out, err := s.run("arm")
		if err != nil || s.grubenv() != "yes,yes" || !s.exists("run/boot-assessment.armed") || s.read("mounted") != "ro\n" {
			t.Fatalf("arm: %v %s; grubenv %q, mounted %q", err, out, s.grubenv(), s.read("mounted"))
		}
		if !strings.Contains(out, "armed for Kairos release "+next) {
			t.Errorf("arm says %q", out)
		}
		s.ready()
		out, err = s.run("verify")
		if err != nil || strings.TrimSpace(s.read("lib/verified-release")) != next || s.grubenv() != "," || s.exists("run/boot-assessment.armed") {
			t.Fatalf("verify: %v %s; verified %q, grubenv %q", err, out, s.read("lib/verified-release"), s.grubenv())
		}
		if s.exists("rebooted") || s.read("mounted") != "ro\n" {
			t.Errorf("rebooted %v, mounted %q", s.exists("rebooted"), s.read("mounted"))
		}
	})

	t.Run("new release, never ready: reboots into the fallback", func(t *testing.T) {
		s.boot("active.img", next, old, cleared, true)
		if out, err := s.run("arm"); err != nil {
			t.Fatalf("arm: %v %s", err, out)
		}
		out, err := s.run("verify")
		if err == nil || !s.exists("rebooted") {
			t.Fatalf("verify did not reboot: %v %s", err, out)
		}
		for _, want := range []string{"boot assessment failed", "k3s-agent is not ready 600s", "quay.io/kairos/ubuntu:test-v3.5.1", "release " + next} {
			if !strings.Contains(out, want) {
				t.Errorf("the message lacks %q: %s", want, out)
			}
		}
		// GRUB's rule at the next boot: both set, so the fallback entry.
		if s.grubenv() != "yes,yes" || strings.TrimSpace(s.read("lib/verified-release")) != old {
			t.Errorf("grubenv %q, verified %q", s.grubenv(), s.read("lib/verified-release"))
		}
	})

	t.Run("fallback boot: not armed, not cleared, the working release recorded", func(t *testing.T) {
		s.boot("passive.img", old, old, "enable_boot_assessment=yes\nboot_assessment_tentative=yes\n", true)
		if out, err := s.run("arm"); err != nil || s.exists("run/boot-assessment.armed") {
			t.Fatalf("arm: %v %s", err, out)
		}
		s.ready()
		if out, err := s.run("verify"); err != nil || s.grubenv() != "yes,yes" || s.exists("rebooted") {
			t.Fatalf("verify: %v %s; grubenv %q", err, out, s.grubenv())
		}
	})

	t.Run("upgrade from the fallback boot: the new image gets its try", func(t *testing.T) {
		// Both variables as the fallback boot left them; Kairos' after-upgrade step has just set
		// enable=yes again. GRUB would boot the fallback entry at once with tentative=yes.
		s.boot("passive.img", old, old, "enable_boot_assessment=yes\nboot_assessment_tentative=yes\n", true)
		out, err := s.run("upgrade")
		if err != nil || s.grubenv() != "yes," || s.read("mounted") != "ro\n" {
			t.Fatalf("upgrade: %v %s; grubenv %q, mounted %q", err, out, s.grubenv(), s.read("mounted"))
		}
		if !strings.Contains(out, "the new image is tried at the next boot") {
			t.Errorf("upgrade says %q", out)
		}
	})

	t.Run("upgrade without GRUB boot assessment on COS_STATE: nothing written", func(t *testing.T) {
		s.boot("active.img", old, old, "enable_boot_assessment=yes\nboot_assessment_tentative=yes\n", false)
		if out, err := s.run("upgrade"); err != nil || s.grubenv() != "yes,yes" || s.exists("mounted") {
			t.Fatalf("upgrade: %v %s; grubenv %q", err, out, s.grubenv())
		}
	})

	t.Run("reboot of the verified release: not armed", func(t *testing.T) {
		s.boot("active.img", old, old, cleared, true)
		if out, err := s.run("arm"); err != nil || s.grubenv() != "," || s.exists("run/boot-assessment.armed") {
			t.Fatalf("arm: %v %s; grubenv %q", err, out, s.grubenv())
		}
		s.ready()
		if out, err := s.run("verify"); err != nil || s.grubenv() != "," {
			t.Fatalf("verify: %v %s; grubenv %q", err, out, s.grubenv())
		}
	})

	t.Run("no GRUB boot assessment on COS_STATE: not armed, never reboots", func(t *testing.T) {
		s.boot("active.img", next, old, cleared, true)
		_ = os.Remove(filepath.Join(s.root, "cos-state/grub_boot_assessment"))
		out, err := s.run("arm")
		if err != nil || s.grubenv() != "," || !strings.Contains(out, "not armed") {
			t.Fatalf("arm: %v %s; grubenv %q", err, out, s.grubenv())
		}
		// Unarmed, verify waits as long as it takes: here the distribution turns ready at the
		// fifth round, after the clock stub would have passed an armed deadline.
		s.write("kubeconfig", "x")
		s.script = strings.Replace(s.script, "    sleep 5\n", "    sleep 5; i=$((${i:-0} + 1)); [ $i -ge 5 ] && touch "+s.root+"/active\n", 1)
		out, err = s.run("verify")
		if err != nil || s.exists("rebooted") || strings.TrimSpace(s.read("lib/verified-release")) != next {
			t.Fatalf("verify: %v %s; verified %q", err, out, s.read("lib/verified-release"))
		}
	})
}
