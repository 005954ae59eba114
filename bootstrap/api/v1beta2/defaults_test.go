package v1beta2_test

import (
	"reflect"
	"testing"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

func boolPtr(b bool) *bool { return &b }

func secretRef(name, key string) *bootstrapv1.SecretKeyReference {
	return &bootstrapv1.SecretKeyReference{Name: name, Key: key}
}

func TestDefault(t *testing.T) {
	tests := []struct {
		name string
		in   bootstrapv1.KairosConfigSpec
		want bootstrapv1.KairosConfigSpec
	}{
		{
			name: "empty spec gets every top-level default and nothing else",
			in:   bootstrapv1.KairosConfigSpec{},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID:   bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:         bootstrapv1.RoleWorker,
				Distribution: bootstrapv1.DistributionK0s,
				UserName:     bootstrapv1.DefaultUserName,
				UserPassword: bootstrapv1.DefaultUserPassword,
				UserGroups:   []string{bootstrapv1.DefaultUserGroup},
			},
		},
		{
			name: "explicit values are kept",
			in: bootstrapv1.KairosConfigSpec{
				Role:         bootstrapv1.RoleControlPlane,
				Distribution: bootstrapv1.DistributionK3s,
				UserName:     "alice",
				UserPassword: "hunter2",
				UserGroups:   []string{"wheel", "docker"},
			},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID:   bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:         bootstrapv1.RoleControlPlane,
				Distribution: bootstrapv1.DistributionK3s,
				UserName:     "alice",
				UserPassword: "hunter2",
				UserGroups:   []string{"wheel", "docker"},
			},
		},
		{
			name: "no password default when userPasswordSecretRef is set; its key is defaulted",
			in:   bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: secretRef("pw", "")},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID:            bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:                  bootstrapv1.RoleWorker,
				Distribution:          bootstrapv1.DistributionK0s,
				UserName:              bootstrapv1.DefaultUserName,
				UserPasswordSecretRef: secretRef("pw", bootstrapv1.DefaultSecretKey),
				UserGroups:            []string{bootstrapv1.DefaultUserGroup},
			},
		},
		{
			name: "empty userGroups list (not nil) is defaulted",
			in:   bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, UserGroups: []string{}},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID:   bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:         bootstrapv1.RoleWorker,
				Distribution: bootstrapv1.DistributionK0s,
				UserName:     bootstrapv1.DefaultUserName,
				UserPassword: bootstrapv1.DefaultUserPassword,
				UserGroups:   []string{bootstrapv1.DefaultUserGroup},
			},
		},
		{
			name: "every secret reference gets the default key; explicit keys are kept",
			in: bootstrapv1.KairosConfigSpec{
				UserPassword:         "x",
				WorkerTokenSecretRef: secretRef("tok", ""),
				Manifests: []bootstrapv1.Manifest{
					{Name: "a.yaml", ContentFrom: secretRef("m-a", "")},
					{Name: "b.yaml", ContentFrom: secretRef("m-b", "custom")},
					{Name: "c.yaml", Content: "a: b"},
				},
				Files: []bootstrapv1.File{
					{Path: "/a", ContentFrom: secretRef("f-a", "")},
					{Path: "/b", ContentFrom: secretRef("f-b", "k")},
					{Path: "/c", Content: "inline"},
				},
				CloudConfigFragments: []bootstrapv1.CloudConfigFragment{
					{Name: "x", ContentFrom: secretRef("frag", "")},
					{Name: "y", Position: bootstrapv1.FragmentPrepend, ContentFrom: secretRef("frag", "other")},
					{Name: "z", Content: "a: b"},
				},
			},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID:           bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:                 bootstrapv1.RoleWorker,
				Distribution:         bootstrapv1.DistributionK0s,
				UserName:             bootstrapv1.DefaultUserName,
				UserPassword:         "x",
				UserGroups:           []string{bootstrapv1.DefaultUserGroup},
				WorkerTokenSecretRef: secretRef("tok", "value"),
				Manifests: []bootstrapv1.Manifest{
					{Name: "a.yaml", ContentFrom: secretRef("m-a", "value")},
					{Name: "b.yaml", ContentFrom: secretRef("m-b", "custom")},
					{Name: "c.yaml", Content: "a: b"},
				},
				Files: []bootstrapv1.File{
					{Path: "/a", ContentFrom: secretRef("f-a", "value")},
					{Path: "/b", ContentFrom: secretRef("f-b", "k")},
					{Path: "/c", Content: "inline"},
				},
				CloudConfigFragments: []bootstrapv1.CloudConfigFragment{
					{Name: "x", Position: bootstrapv1.FragmentAppend, ContentFrom: secretRef("frag", "value")},
					{Name: "y", Position: bootstrapv1.FragmentPrepend, ContentFrom: secretRef("frag", "other")},
					{Name: "z", Position: bootstrapv1.FragmentAppend, Content: "a: b"},
				},
			},
		},
		{
			name: "install block gets auto and device",
			in:   bootstrapv1.KairosConfigSpec{UserPassword: "x", Install: &bootstrapv1.Install{}},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:       bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK0s,
				UserName: bootstrapv1.DefaultUserName, UserPassword: "x", UserGroups: []string{bootstrapv1.DefaultUserGroup},
				Install: &bootstrapv1.Install{Auto: boolPtr(true), Device: "auto", Reboot: boolPtr(true)},
			},
		},
		{
			name: "install that powers off does not reboot",
			in:   bootstrapv1.KairosConfigSpec{UserPassword: "x", Install: &bootstrapv1.Install{Poweroff: true}},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:       bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK0s,
				UserName: bootstrapv1.DefaultUserName, UserPassword: "x", UserGroups: []string{bootstrapv1.DefaultUserGroup},
				Install: &bootstrapv1.Install{Auto: boolPtr(true), Device: "auto", Poweroff: true},
			},
		},
		{
			name: "install auto false and an explicit device are kept",
			in: bootstrapv1.KairosConfigSpec{UserPassword: "x",
				Install: &bootstrapv1.Install{Auto: boolPtr(false), Device: "/dev/vda", Reboot: boolPtr(true)}},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:       bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK0s,
				UserName: bootstrapv1.DefaultUserName, UserPassword: "x", UserGroups: []string{bootstrapv1.DefaultUserGroup},
				Install: &bootstrapv1.Install{Auto: boolPtr(false), Device: "/dev/vda", Reboot: boolPtr(true)},
			},
		},
		{
			name: "no install block is not created",
			in:   bootstrapv1.KairosConfigSpec{UserPassword: "x"},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:       bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK0s,
				UserName: bootstrapv1.DefaultUserName, UserPassword: "x", UserGroups: []string{bootstrapv1.DefaultUserGroup},
			},
		},
		{
			name: "fields without defaults are left alone",
			in: bootstrapv1.KairosConfigSpec{
				UserPassword:      "x",
				KubernetesVersion: "v1.31.2",
				GithubUser:        "octocat",
				HostnamePrefix:    "node-",
				PreCommands:       []string{"echo pre"},
				K0s:               &bootstrapv1.DistributionOptions{Args: []string{"--debug"}},
			},
			want: bootstrapv1.KairosConfigSpec{
				ProviderID: bootstrapv1.ProviderIDSpec{Source: bootstrapv1.ProviderIDFromMachine},
				Role:       bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK0s,
				UserName: bootstrapv1.DefaultUserName, UserPassword: "x", UserGroups: []string{bootstrapv1.DefaultUserGroup},
				KubernetesVersion: "v1.31.2",
				GithubUser:        "octocat",
				HostnamePrefix:    "node-",
				PreCommands:       []string{"echo pre"},
				K0s:               &bootstrapv1.DistributionOptions{Args: []string{"--debug"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.DeepCopy()
			got.Default()
			if !reflect.DeepEqual(*got, tc.want) {
				t.Fatalf("Default():\n got  %+v\n want %+v", *got, tc.want)
			}
			// Idempotence: defaulting a defaulted spec changes nothing.
			again := got.DeepCopy()
			again.Default()
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("Default() is not idempotent:\n first  %+v\n second %+v", *got, *again)
			}
		})
	}
}

func TestDefaultDoesNotShareTheGroupsSlice(t *testing.T) {
	a, b := &bootstrapv1.KairosConfigSpec{}, &bootstrapv1.KairosConfigSpec{}
	a.Default()
	b.Default()
	a.UserGroups[0] = "mutated"
	if b.UserGroups[0] != bootstrapv1.DefaultUserGroup {
		t.Fatalf("defaulted specs share their userGroups slice: b.UserGroups = %v", b.UserGroups)
	}
}

func TestDefaultSecretKeyIsValue(t *testing.T) {
	// The key is part of the API contract: documented as "Defaults to value", and the data
	// Secret's key is also "value".
	if bootstrapv1.DefaultSecretKey != "value" {
		t.Fatalf("DefaultSecretKey = %q, want value", bootstrapv1.DefaultSecretKey)
	}
}

// TestDefaultLoginUser: the login user's defaults are part of the API contract (documented on
// userName, userPassword and userGroups, and named by admission's password warning).
func TestDefaultLoginUser(t *testing.T) {
	if bootstrapv1.DefaultUserName != "kairos" || bootstrapv1.DefaultUserPassword != "kairos" || bootstrapv1.DefaultUserGroup != "admin" {
		t.Fatalf("defaults = user %q, password %q, groups [%q]; want kairos, kairos, [admin]",
			bootstrapv1.DefaultUserName, bootstrapv1.DefaultUserPassword, bootstrapv1.DefaultUserGroup)
	}
}

func TestUsesDefaultPassword(t *testing.T) {
	tests := []struct {
		name string
		spec bootstrapv1.KairosConfigSpec
		want bool
	}{
		{"empty password", bootstrapv1.KairosConfigSpec{}, true},
		{"the default password", bootstrapv1.KairosConfigSpec{UserPassword: bootstrapv1.DefaultUserPassword}, true},
		{"another password", bootstrapv1.KairosConfigSpec{UserPassword: "not-the-default"}, false},
		{"password from a Secret", bootstrapv1.KairosConfigSpec{UserPasswordSecretRef: secretRef("pw", "")}, false},
		{"both (invalid, but not the default)", bootstrapv1.KairosConfigSpec{UserPassword: "kairos", UserPasswordSecretRef: secretRef("pw", "")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.spec.UsesDefaultPassword(); got != tc.want {
				t.Fatalf("UsesDefaultPassword() = %v, want %v", got, tc.want)
			}
			// Defaulting never changes the answer.
			d := tc.spec.DeepCopy()
			d.Default()
			if got := d.UsesDefaultPassword(); got != tc.want {
				t.Fatalf("after Default(), UsesDefaultPassword() = %v, want %v", got, tc.want)
			}
		})
	}
}
