package kairoscontrolplane

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func configTemplate(name string, spec bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfigTemplate {
	return &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: spec}},
	}
}

func TestUpToDate(t *testing.T) {
	const machineAge = time.Hour
	cases := []struct {
		name string
		// setup runs before the Machine is created: it shapes what the Machine was built from.
		setup func(f *fixture)
		// change runs after: it is what changed since, on the spec or on the Machine's objects.
		change     func(f *fixture)
		wantOK     bool
		wantReason []string
	}{
		{name: "nothing changed", wantOK: true},
		{name: "version changed",
			change:     func(f *fixture) { f.kcp.Spec.Version = "v1.32.0" },
			wantReason: []string{"version v1.31.2, want v1.32.0"}},
		{name: "infrastructure template renamed",
			change: func(f *fixture) {
				f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "cp-large"
				f.objs = append(f.objs, infraTemplate("cp-large", "large"))
			},
			wantReason: []string{"infrastructure template cp-small, want cp-large"}},
		{name: "infrastructure template of another kind with the same name",
			change:     func(f *fixture) { f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Kind = "OtherMachineTemplate" },
			wantReason: []string{"infrastructure template cp-small, want cp-small"}},
		{name: "infrastructure machine lost its cloned-from annotations",
			change:     func(f *fixture) { f.infras["m1"].SetAnnotations(nil) },
			wantReason: []string{"infrastructure template , want cp-small"}},
		{name: "infrastructure machine does not exist: nothing to compare",
			change: func(f *fixture) { delete(f.infras, "m1") },
			wantOK: true},
		{name: "KairosConfig spec changed",
			change:     func(f *fixture) { f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo changed"} },
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "KairosConfig does not exist: nothing to compare",
			change: func(f *fixture) {
				f.kcp.Spec.KairosConfigSpec.PreCommands = []string{"echo changed"}
				delete(f.configs, "m1")
			},
			wantOK: true},
		{name: "rollout.after passed, Machine created before it",
			change: func(f *fixture) {
				f.kcp.Spec.Rollout.After = metav1.NewTime(f.now.Add(-machineAge / 2))
			},
			wantReason: []string{"created before rollout.after"}},
		{name: "rollout.after passed, Machine created after it",
			change: func(f *fixture) {
				f.kcp.Spec.Rollout.After = metav1.NewTime(f.now.Add(-2 * machineAge))
			},
			wantOK: true},
		{name: "rollout.after in the future",
			change: func(f *fixture) {
				f.kcp.Spec.Rollout.After = metav1.NewTime(f.now.Add(time.Hour))
			},
			wantOK: true},
		{name: "several reasons at once",
			change: func(f *fixture) {
				f.kcp.Spec.Version = "v1.32.0"
				f.kcp.Spec.KairosConfigSpec.PreCommands = nil
				f.kcp.Spec.Rollout.After = metav1.NewTime(f.now.Add(-time.Minute))
			},
			wantReason: []string{"version v1.31.2, want v1.32.0", "KairosConfig spec changed", "created before rollout.after"}},
		{name: "single node only: created with 1 replica, now 3",
			setup:  func(f *fixture) { f.replicas(1) },
			change: func(f *fixture) { f.replicas(3) },
			wantOK: true},
		{name: "single node only: created with 3 replicas, now 1",
			setup:  func(f *fixture) { f.replicas(3) },
			change: func(f *fixture) { f.replicas(1) },
			wantOK: true},
		{name: "single node and a real change",
			setup: func(f *fixture) { f.replicas(1) },
			change: func(f *fixture) {
				f.replicas(3)
				f.kcp.Spec.KairosConfigSpec.SSHPublicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGc0t2AjB1fDkgZf8h1m7k0b5yTtq2Q0kq9dS6uJ7m9x me@example.com"
			},
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "KairosConfig stored by an older provider without the defaults it adds",
			setup: func(f *fixture) {
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{
					UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "pw"},
					Install:               &bootstrapv1.Install{Reboot: ptr.To(true)},
					Files:                 []bootstrapv1.File{{Path: "/etc/motd", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "motd"}}},
					CloudConfigFragments:  []bootstrapv1.CloudConfigFragment{{Name: "extra", Content: "#cloud-config\n"}},
				}
			},
			change: func(f *fixture) {
				// What an older provider stored: the user's input, role, nothing defaulted.
				f.configs["m1"].Spec = bootstrapv1.KairosConfigSpec{
					Role:                  bootstrapv1.RoleControlPlane,
					UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "pw"},
					Install:               &bootstrapv1.Install{Reboot: ptr.To(true)},
					Files:                 []bootstrapv1.File{{Path: "/etc/motd", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "motd"}}},
					CloudConfigFragments:  []bootstrapv1.CloudConfigFragment{{Name: "extra", Content: "#cloud-config\n"}},
				}
			},
			wantOK: true},
		{name: "KairosConfig stored without userName, userGroups, password and distribution (k0s)",
			setup: func(f *fixture) { f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{} },
			change: func(f *fixture) {
				f.configs["m1"].Spec = bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane}
			},
			wantOK: true},
		{name: "KairosConfig stored without userName and userGroups (k3s)",
			setup: func(f *fixture) { f.k3s() },
			change: func(f *fixture) {
				f.configs["m1"].Spec.UserName = ""
				f.configs["m1"].Spec.UserGroups = nil
			},
			wantOK: true},
		{name: "KairosConfig stored with explicit default values that the spec leaves empty",
			setup: func(f *fixture) { f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{} },
			change: func(f *fixture) {
				f.configs["m1"].Spec.UserName = bootstrapv1.DefaultUserName
				f.configs["m1"].Spec.UserGroups = []string{bootstrapv1.DefaultUserGroup}
			},
			wantOK: true},
		// An empty role or distribution is not "a default not yet written": the bootstrap
		// provider renders an empty role as a worker and an empty distribution as k0s, so
		// such a Machine really differs from a k3s control-plane Machine.
		{name: "KairosConfig without distribution on a k3s control plane really is k0s",
			setup:      func(f *fixture) { f.k3s() },
			change:     func(f *fixture) { f.configs["m1"].Spec.Distribution = "" },
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "KairosConfig without role renders a worker",
			change:     func(f *fixture) { f.configs["m1"].Spec.Role = "" },
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "user input differs from the stored default",
			setup: func(f *fixture) { f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{} },
			change: func(f *fixture) {
				f.kcp.Spec.KairosConfigSpec.UserName = "ops"
			},
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "switch to a KairosConfigTemplate with the same spec as the inline one",
			change: func(f *fixture) {
				f.objs = append(f.objs, configTemplate("cp-config", f.kcp.Spec.KairosConfigSpec))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			},
			wantOK: true},
		{name: "switch to a KairosConfigTemplate with another spec",
			change: func(f *fixture) {
				f.objs = append(f.objs, configTemplate("cp-config", bootstrapv1.KairosConfigSpec{UserPassword: "other"}))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			},
			wantReason: []string{"KairosConfig spec changed"}},
		{name: "KairosConfigTemplate whose role and distribution the provider overrides",
			change: func(f *fixture) {
				spec := f.kcp.Spec.KairosConfigSpec
				spec.Role = bootstrapv1.RoleWorker
				spec.Distribution = bootstrapv1.DistributionK0s
				f.objs = append(f.objs, configTemplate("cp-config", spec))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			},
			wantOK: true},
		{name: "missing KairosConfigTemplate: the config is not compared",
			change: func(f *fixture) {
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "missing"}
				f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
			},
			wantOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			m := f.machine("m1", machineAge)
			if tc.change != nil {
				tc.change(f)
			}
			e := f.build()
			s := e.scope(testContext(t))
			got, reasons := s.upToDate(s.machines["m1"])
			if got != tc.wantOK {
				t.Fatalf("upToDate(%s) = %v (%q), want %v", m.Name, got, reasons, tc.wantOK)
			}
			if tc.wantOK && len(reasons) > 0 {
				t.Errorf("up to date with reasons %q", reasons)
			}
			if len(reasons) != len(tc.wantReason) {
				t.Errorf("reasons = %q, want %d of them: %q", reasons, len(tc.wantReason), tc.wantReason)
			}
			containsAll(t, "reasons", strings.Join(reasons, "\n"), tc.wantReason...)
		})
	}
}

func TestLoadBaseConfig(t *testing.T) {
	cases := []struct {
		name     string
		change   func(f *fixture)
		wantBase *bootstrapv1.KairosConfigSpec
		wantErr  string
	}{
		{name: "inline spec",
			wantBase: &bootstrapv1.KairosConfigSpec{UserPassword: "s3cret", PreCommands: []string{"echo hello"}}},
		{name: "template",
			change: func(f *fixture) {
				f.objs = append(f.objs, configTemplate("cp-config", bootstrapv1.KairosConfigSpec{UserPassword: "tmpl"}))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
			},
			wantBase: &bootstrapv1.KairosConfigSpec{UserPassword: "tmpl"}},
		{name: "template with the control plane's distribution",
			change: func(f *fixture) {
				f.k3s()
				f.objs = append(f.objs, configTemplate("cp-config", bootstrapv1.KairosConfigSpec{Distribution: bootstrapv1.DistributionK3s}))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
			},
			wantBase: &bootstrapv1.KairosConfigSpec{Distribution: bootstrapv1.DistributionK3s}},
		{name: "missing template",
			change: func(f *fixture) {
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
			},
			wantErr: "KairosConfigTemplate cp-config does not exist"},
		{name: "template of another distribution",
			change: func(f *fixture) {
				f.objs = append(f.objs, configTemplate("cp-config", bootstrapv1.KairosConfigSpec{Distribution: bootstrapv1.DistributionK3s}))
				f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
			},
			wantErr: "KairosConfigTemplate cp-config has distribution k3s but the control plane runs k0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.change != nil {
				tc.change(f)
			}
			s := f.build().scope(testContext(t))
			if s.configTemplateErr != tc.wantErr {
				t.Errorf("configTemplateErr = %q, want %q", s.configTemplateErr, tc.wantErr)
			}
			switch {
			case tc.wantBase == nil && s.baseConfig != nil:
				t.Errorf("baseConfig = %+v, want nil", s.baseConfig)
			case tc.wantBase != nil && (s.baseConfig == nil || s.baseConfig.UserPassword != tc.wantBase.UserPassword ||
				s.baseConfig.Distribution != tc.wantBase.Distribution || len(s.baseConfig.PreCommands) != len(tc.wantBase.PreCommands)):
				t.Errorf("baseConfig = %+v, want %+v", s.baseConfig, tc.wantBase)
			}
			if tc.wantBase == nil && s.desiredConfig() != nil {
				t.Error("desiredConfig without a base config must be nil")
			}
		})
	}
}

func TestNewScope(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	f.machine("m2", time.Hour)
	f.machine("m3", time.Hour, func(m *clusterv1.Machine) {
		// A Machine whose bootstrap is not a KairosConfig is kept, without a config.
		m.Spec.Bootstrap.ConfigRef.Kind = "OtherConfig"
	})
	delete(f.configs, "m2")
	delete(f.infras, "m2")
	// A Machine of the Cluster that this control plane does not own.
	worker := f.machine("worker", time.Hour, func(m *clusterv1.Machine) {
		m.OwnerReferences = nil
		delete(m.Labels, clusterv1.MachineControlPlaneLabel)
	})
	// A Machine of another Cluster owned by a control plane of the same name elsewhere.
	f.machine("other", time.Hour, func(m *clusterv1.Machine) { m.Labels[clusterv1.ClusterNameLabel] = "other" })
	e := f.build()
	s := e.scope(ctx)

	if got := machineNames(s.machines); got != "m1, m2, m3" {
		t.Errorf("machines = %s, want m1, m2, m3 (not %s, not other)", got, worker.Name)
	}
	if _, ok := s.configs["m1"]; !ok {
		t.Error("m1 has no KairosConfig in the scope")
	}
	for _, name := range []string{"m2", "m3"} {
		if _, ok := s.configs[name]; ok {
			t.Errorf("%s has a KairosConfig in the scope", name)
		}
	}
	if _, ok := s.infraMachines["m2"]; ok {
		t.Error("m2 has an infrastructure machine in the scope")
	}
	if infra, ok := s.infraMachines["m1"]; !ok || infra.GetAPIVersion() != infraGV.String() {
		t.Errorf("m1 infrastructure machine = %v", infra)
	}
	if s.reconcileTime.IsZero() {
		t.Error("reconcileTime not set")
	}
}

func TestNewScopeInfrastructureCRDMissing(t *testing.T) {
	f := newFixture(t)
	f.machine("m1", time.Hour)
	f.noCRDs = true
	e := f.build()
	_, err := e.r.newScope(testContext(t), e.kcp, e.cluster)
	if err == nil || !strings.Contains(err.Error(), "reading the infrastructure machine of m1") || !strings.Contains(err.Error(), `"testmachines.infrastructure.cluster.x-k8s.io" not found`) {
		t.Fatalf("newScope error = %v, want one about the CRD", err)
	}
}

func TestOutdatedMachinesSkipsDeleting(t *testing.T) {
	f := newFixture(t)
	f.machine("m1", 3*time.Hour)
	f.machine("m2", 2*time.Hour, deleting(time.Minute, ""))
	f.machine("m3", time.Hour, withVersion("v1.32.0"))
	f.kcp.Spec.Version = "v1.32.0"
	s := f.build().scope(testContext(t))
	outdated, reasons := s.outdatedMachines()
	if got := machineNames(outdated); got != "m1" {
		t.Errorf("outdated = %s, want m1", got)
	}
	if len(reasons) != 1 || len(reasons["m1"]) != 1 {
		t.Errorf("reasons = %v", reasons)
	}
}

func TestControlPlaneFailureDomains(t *testing.T) {
	f := newFixture(t)
	f.cluster.Status.FailureDomains = []clusterv1.FailureDomain{
		{Name: "a", ControlPlane: ptr.To(true)}, {Name: "workers"}, {Name: "b", ControlPlane: ptr.To(true)}, {Name: "c", ControlPlane: ptr.To(false)},
	}
	s := f.build().scope(testContext(t))
	var names []string
	for _, fd := range s.controlPlaneFailureDomains() {
		names = append(names, fd.Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("control-plane failure domains = %v, want [a b]", names)
	}
}
