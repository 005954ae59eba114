package vsphere_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// TestSandboxOnVSphere runs the sandbox as `make sandbox INFRA=vsphere` does (-infra vsphere),
// in this test's network namespace (the sandbox makes its own only when it is not in one): it
// must bring the vSphere flavor's cluster up through CAPV, list the simulated vCenter's VMs with
// the control-plane VM powered on at a node address, and, stopped by SIGTERM as a terminal's
// Ctrl-C would stop it, end with status 0 and leave nothing in its TMPDIR.
func TestSandboxOnVSphere(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sandbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sandbox")
	build.Dir = filepath.Join(root, "test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sandbox: %v\n%s", err, out)
	}
	tmp := t.TempDir()
	p, err := framework.StartProcess("sandbox", filepath.Join(t.TempDir(), "sandbox.log"), []string{"TMPDIR=" + tmp},
		bin, "-cluster", "sbx", "-workers", "0", "-infra", "vsphere")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(time.Minute) })
	framework.Eventually(t, 8*time.Minute, func() error {
		if exited, err := p.Exited(); exited {
			t.Fatalf("the sandbox exited (%v):\n%s", err, p.Output())
		}
		if !strings.Contains(p.Output(), "Press Ctrl-C to stop everything.") {
			return errors.New("the sandbox does not say it is running yet")
		}
		return nil
	})
	out := p.Output()
	for _, want := range []string{"CAPV v1.16.1", "cluster-template-vsphere.yaml", "VSphereMachine/sbx-control-plane-", "Available=True", "VMs of the simulated vCenter", "nsenter --net=/proc/"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^  sbx-control-plane-\S+\s+poweredOn\s+[0-9a-f-]{36}\s+198\.19\.`).MatchString(out) {
		t.Errorf("the VM listing shows no powered-on control-plane VM at a node address:\n%s", out)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		if exited, err := p.Exited(); !exited {
			return errors.New("the sandbox has not ended yet")
		} else if err != nil {
			t.Fatalf("the sandbox ended with %v:\n%s", err, tail(p.Output(), 40))
		}
		return nil
	})
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the sandbox left %d entries in its TMPDIR", len(left))
	}
}
