package simnode

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
)

func TestParseArgs(t *testing.T) {
	f := parseArgs([]string{
		"--config=/etc/k0s/k0s.yaml", "--enable-worker", "--no-taints",
		"--labels a=b,c=d", "--taints", "x=y:NoSchedule", "--node-taint=k:NoExecute", "--node-taint=l=m:NoSchedule",
	})
	if f.value("config") != "/etc/k0s/k0s.yaml" || !f.bool("enable-worker") || !f.bool("no-taints") {
		t.Fatalf("flags %v", f)
	}
	if got := f.list("labels"); !reflect.DeepEqual(got, []string{"a=b", "c=d"}) {
		t.Errorf("labels %v", got)
	}
	if got := f.list("taints"); !reflect.DeepEqual(got, []string{"x=y:NoSchedule"}) {
		t.Errorf("taints %v", got)
	}
	taints, err := parseTaints(f.list("node-taint"))
	if err != nil || len(taints) != 2 || taints[0] != (taint{key: "k", effect: "NoExecute"}) || taints[1] != (taint{key: "l", value: "m", effect: "NoSchedule"}) {
		t.Errorf("node taints %+v %v", taints, err)
	}
	if _, err := parseTaints([]string{"novalue"}); err == nil {
		t.Error("a taint without effect was accepted")
	}
}

func TestPreflight(t *testing.T) {
	script := "#!/bin/sh\nwant=v1.31.2\ninstalled=$(k0s version)\n"
	p := &plan{distribution: "k0s", files: map[string]string{"/usr/local/lib/kairos-capi/preflight.sh": script}}
	if got := p.installedVersion(""); got != "v1.31.2+k0s.0" {
		t.Errorf("default installed version %q", got)
	}
	for installed, ok := range map[string]bool{"v1.31.2+k0s.0": true, "v1.31.2": true, "v1.31.3+k0s.0": false, "": false} {
		if err := p.preflight(installed); (err == nil) != ok {
			t.Errorf("installed %q: %v", installed, err)
		}
	}
	pinned := &plan{distribution: "k3s", files: map[string]string{"/usr/local/lib/kairos-capi/preflight.sh": "want=v1.31.2+k3s1\n"}}
	if err := pinned.preflight("v1.31.2+k3s2"); err == nil {
		t.Error("a pinned build accepted another build")
	}
	if kubeletVersion("v1.31.2+k0s.0") != "v1.31.2+k0s" || kubeletVersion("v1.31.2+k3s1") != "v1.31.2+k3s1" {
		t.Error("kubelet versions")
	}
}

// TestDocumentBootAssessmentSteps: the simulation finds kairos-capi's boot assessment steps in a
// rendered document by their paths and commands, and only when they are complete.
func TestDocumentBootAssessmentSteps(t *testing.T) {
	ca, err := pki.NewCA("sim-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := token.NewK3sAgentToken(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := render.Document(render.Node{
		Distribution: render.K3s, Role: render.RoleWorker, KubernetesVersion: "v1.36.3", ClusterName: "sim",
		Endpoint: render.Endpoint{Host: "10.0.0.1", Port: 6443}, Users: []render.User{{Name: "kairos"}}, JoinToken: agent,
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := func(doc string) assessmentSteps {
		t.Helper()
		p, err := parseDocument([]byte(doc), "0123456789abcdef0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		return p.bootAssessmentSteps()
	}
	if got := steps(string(doc)); got != (assessmentSteps{arm: true, verify: true, upgrade: true}) {
		t.Fatalf("rendered document: %+v", got)
	}
	for name, tc := range map[string]struct {
		old, new string
		want     assessmentSteps
	}{
		"arm not run":            {render.BootAssessmentScript + " arm", render.BootAssessmentScript + " check", assessmentSteps{verify: true, upgrade: true}},
		"nothing set in GRUB":    {"grub2-editenv", "echo", assessmentSteps{verify: true}},
		"verify never started":   {"systemctl start --no-block " + render.BootAssessmentUnit, "echo skipped", assessmentSteps{arm: true, upgrade: true}},
		"verify runs other mode": {render.BootAssessmentScript + " verify", render.BootAssessmentScript + " arm", assessmentSteps{arm: true, upgrade: true}},
		"upgrade not run":        {render.BootAssessmentScript + " upgrade", render.BootAssessmentScript + " check", assessmentSteps{arm: true, verify: true}},
		"upgrade clears nothing": {"set boot_assessment_tentative=\n", "list\n", assessmentSteps{arm: true, verify: true}},
	} {
		if !strings.Contains(string(doc), tc.old) {
			t.Fatalf("%s: the document has no %q", name, tc.old)
		}
		if got := steps(strings.ReplaceAll(string(doc), tc.old, tc.new)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}
