package desiredstate_test

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
)

func TestKairosConfigSpec(t *testing.T) {
	tests := []struct {
		name       string
		base       bootstrapv1.KairosConfigSpec
		dist       bootstrapv1.Distribution
		singleNode bool
		check      func(*testing.T, *bootstrapv1.KairosConfigSpec)
	}{
		{
			name: "empty base, k0s, one replica", dist: bootstrapv1.DistributionK0s, singleNode: true,
			check: func(t *testing.T, s *bootstrapv1.KairosConfigSpec) {
				if !s.SingleNode {
					t.Error("singleNode not set")
				}
			},
		},
		{
			name: "empty base, k3s, HA", dist: bootstrapv1.DistributionK3s,
			check: func(t *testing.T, s *bootstrapv1.KairosConfigSpec) {
				if s.SingleNode {
					t.Error("singleNode set for an HA control plane")
				}
			},
		},
		{
			name: "provider-owned fields override the base",
			base: bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK3s, SingleNode: true},
			dist: bootstrapv1.DistributionK0s,
			check: func(t *testing.T, s *bootstrapv1.KairosConfigSpec) {
				if s.SingleNode {
					t.Error("singleNode of the base survived")
				}
			},
		},
		{
			name: "user values kept, defaults filled",
			base: bootstrapv1.KairosConfigSpec{
				UserName:              "ops",
				UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "pw"},
				Files:                 []bootstrapv1.File{{Path: "/etc/motd", Content: "hi"}},
				CloudConfigFragments:  []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: b"}},
				Install:               &bootstrapv1.Install{},
			},
			dist: bootstrapv1.DistributionK0s,
			check: func(t *testing.T, s *bootstrapv1.KairosConfigSpec) {
				if s.UserName != "ops" || s.UserPassword != "" || s.UserPasswordSecretRef.Key != bootstrapv1.DefaultSecretKey {
					t.Errorf("user: %q %q %+v", s.UserName, s.UserPassword, s.UserPasswordSecretRef)
				}
				if s.CloudConfigFragments[0].Position != bootstrapv1.FragmentAppend {
					t.Errorf("fragment position not defaulted: %q", s.CloudConfigFragments[0].Position)
				}
				if s.Install.Auto == nil || !*s.Install.Auto || s.Install.Device != "auto" {
					t.Errorf("install not defaulted: %+v", s.Install)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base.DeepCopy()
			before := base.DeepCopy()
			got := desiredstate.KairosConfigSpec(base, tc.dist, tc.singleNode, nil)

			if got.Role != bootstrapv1.RoleControlPlane {
				t.Errorf("role = %q, want control-plane", got.Role)
			}
			if got.Distribution != tc.dist {
				t.Errorf("distribution = %q, want %q", got.Distribution, tc.dist)
			}
			if got.SingleNode != tc.singleNode {
				t.Errorf("singleNode = %v, want %v", got.SingleNode, tc.singleNode)
			}
			// Defaults applied: defaulting the result again changes nothing.
			again := got.DeepCopy()
			again.Default()
			if !equality.Semantic.DeepEqual(got, again) {
				t.Errorf("result is not defaulted:\n%+v\n%+v", got, again)
			}
			if got.UserName == "" || len(got.UserGroups) == 0 {
				t.Errorf("bootstrap defaults missing: %+v", got)
			}
			tc.check(t, got)

			// The input is neither changed nor shared.
			if !reflect.DeepEqual(base, before) {
				t.Errorf("input mutated:\nbefore %+v\nafter  %+v", before, base)
			}
			if len(got.Files) > 0 {
				got.Files[0].Content = "changed"
				if base.Files[0].Content == "changed" {
					t.Error("result shares memory with the input")
				}
			}
		})
	}
}

// TestKairosConfigSpecStable: two calls on equal input give equal output, the property the
// controller's rollout decision relies on.
func TestKairosConfigSpecStable(t *testing.T) {
	base := bootstrapv1.KairosConfigSpec{UserPassword: "x", Files: []bootstrapv1.File{{Path: "/a", Content: "b"}}}
	a := desiredstate.KairosConfigSpec(&base, bootstrapv1.DistributionK0s, false, nil)
	b := desiredstate.KairosConfigSpec(&base, bootstrapv1.DistributionK0s, false, nil)
	if !equality.Semantic.DeepEqual(a, b) {
		t.Fatalf("unstable: %+v vs %+v", a, b)
	}
	// Applying the result again as a base is a fixed point.
	c := desiredstate.KairosConfigSpec(a, bootstrapv1.DistributionK0s, false, nil)
	if !equality.Semantic.DeepEqual(a, c) {
		t.Fatalf("not a fixed point: %+v vs %+v", a, c)
	}
}

func TestMachineName(t *testing.T) {
	tests := []struct {
		tmpl    string
		want    string
		wantErr string
	}{
		{tmpl: "", want: "cp-x7k2q"},
		{tmpl: controlplanev1.DefaultMachineNamingTemplate, want: "cp-x7k2q"},
		{tmpl: "{{ .cluster.name }}-cp-{{ .random }}", want: "demo-cp-x7k2q"},
		{tmpl: "{{ .random }}-{{ .cluster.name", wantErr: "is not a valid Go template"},
		{tmpl: "{{ .random }}-{{ .cluster.nam }}", wantErr: "use .cluster.name, .kairosControlPlane.name and .random"},
		{tmpl: "{{ .random }}_X", wantErr: `renders "x7k2q_X", which is not a valid Machine name`},
	}
	for _, tc := range tests {
		got, err := desiredstate.MachineName(tc.tmpl, "demo", "cp", "x7k2q")
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("MachineName(%q): error %v, want one containing %q", tc.tmpl, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("MachineName(%q) = %q, %v, want %q", tc.tmpl, got, err, tc.want)
		}
	}
	// A control-plane name as long as a name may be: trimmed to 63 characters, keeping the
	// random part, as Cluster API does.
	long := strings.Repeat("a", 253)
	if got, err := desiredstate.MachineName("", "demo", long, "x7k2q"); err != nil || got != strings.Repeat("a", 58)+"x7k2q" {
		t.Errorf("MachineName of a long control plane = %q, %v; want 58 characters of its name and the random part", got, err)
	}
	// Object names are DNS subdomains and may have dots; a Machine's name is its node's hostname,
	// a DNS label: the dots of the names become hyphens, short or trimmed.
	for _, tc := range []struct{ tmpl, cluster, cp, want string }{
		{"", "demo", "prod.cp", "prod-cp-x7k2q"},
		{"{{ .cluster.name }}-{{ .kairosControlPlane.name }}-{{ .random }}", "eu.demo", "cp.v2", "eu-demo-cp-v2-x7k2q"},
		{"", "demo", strings.Repeat("a.", 40) + "b", strings.Repeat("a-", 29) + "x7k2q"},
	} {
		if got, err := desiredstate.MachineName(tc.tmpl, tc.cluster, tc.cp, "x7k2q"); err != nil || got != tc.want {
			t.Errorf("MachineName(%q, %q, %q) = %q, %v; want %q", tc.tmpl, tc.cluster, tc.cp, got, err, tc.want)
		}
	}
}

// The control plane owns etcdSnapshots: spec.etcd.snapshots replaces whatever the base spec (a
// KairosConfigTemplate, which CEL cannot reach) holds, is copied rather than shared, and is
// requested without defaults (the bootstrap provider's webhook applies its own); without
// snapshots the field stays absent, so that existing Machines are not outdated by this release.
func TestRequestedKairosConfigSpecEtcdSnapshots(t *testing.T) {
	snapshots := &bootstrapv1.EtcdSnapshots{S3: bootstrapv1.EtcdSnapshotS3{
		Endpoint: "s3.example.com", Bucket: "backups",
		CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
	}}
	base := &bootstrapv1.KairosConfigSpec{EtcdSnapshots: &bootstrapv1.EtcdSnapshots{S3: bootstrapv1.EtcdSnapshotS3{Bucket: "from-template"}}}

	got := desiredstate.RequestedKairosConfigSpec(base, bootstrapv1.DistributionK3s, true, snapshots)
	if !reflect.DeepEqual(got.EtcdSnapshots, snapshots) || got.EtcdSnapshots == snapshots {
		t.Errorf("etcdSnapshots = %+v, want a copy of spec.etcd.snapshots", got.EtcdSnapshots)
	}
	if got.EtcdSnapshots.Schedule != "" || got.EtcdSnapshots.Retention != nil {
		t.Errorf("requested with defaults: %+v", got.EtcdSnapshots)
	}
	if base.EtcdSnapshots.S3.Bucket != "from-template" {
		t.Error("the base spec was modified")
	}

	defaulted := desiredstate.KairosConfigSpec(base, bootstrapv1.DistributionK3s, true, snapshots)
	if defaulted.EtcdSnapshots.Schedule != bootstrapv1.DefaultEtcdSnapshotSchedule || *defaulted.EtcdSnapshots.Retention != bootstrapv1.DefaultEtcdSnapshotRetention ||
		defaulted.EtcdSnapshots.S3.Region != bootstrapv1.DefaultEtcdSnapshotS3Region {
		t.Errorf("defaults not applied: %+v", defaulted.EtcdSnapshots)
	}
	if snapshots.Schedule != "" {
		t.Error("defaulting modified spec.etcd.snapshots")
	}

	if got := desiredstate.KairosConfigSpec(base, bootstrapv1.DistributionK3s, true, nil); got.EtcdSnapshots != nil {
		t.Errorf("without spec.etcd.snapshots: %+v", got.EtcdSnapshots)
	}
}
