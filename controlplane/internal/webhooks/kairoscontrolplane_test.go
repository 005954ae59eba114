package webhooks

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

func kcpTemplate(annotations map[string]string, mutate func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec)) *controlplanev1.KairosControlPlaneTemplate {
	t := &controlplanev1.KairosControlPlaneTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp", Annotations: annotations},
		Spec: controlplanev1.KairosControlPlaneTemplateSpec{Template: controlplanev1.KairosControlPlaneTemplateResource{
			Spec: controlplanev1.KairosControlPlaneTemplateResourceSpec{KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"}},
		}},
	}
	if mutate != nil {
		mutate(&t.Spec.Template.Spec)
	}
	return t
}

func withRequest(dryRun *bool) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid", Operation: admissionv1.Update, DryRun: dryRun,
	}})
}

func TestKairosControlPlaneTemplateUpdate(t *testing.T) {
	dryRunAnnotation := map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	changed := func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
		s.KairosConfigSpec.PreCommands = []string{"echo changed"}
	}
	cases := []struct {
		name string
		ctx  context.Context
		// annotations are those of the new object.
		annotations map[string]string
		oldMutate   func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec)
		newMutate   func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec)
		wantErr     string
	}{
		{name: "unchanged", ctx: withRequest(nil)},
		{name: "changed: immutable", ctx: withRequest(nil), newMutate: changed,
			wantErr: "KairosControlPlaneTemplate spec is immutable: create a new template and point the ClusterClass at it"},
		{name: "changed in a topology dry run: tolerated", ctx: withRequest(ptr.To(true)), annotations: dryRunAnnotation, newMutate: changed},
		{name: "changed in a dry run without the topology annotation", ctx: withRequest(ptr.To(true)), newMutate: changed,
			wantErr: "immutable"},
		{name: "changed with the annotation but not a dry run", ctx: withRequest(ptr.To(false)), annotations: dryRunAnnotation, newMutate: changed,
			wantErr: "immutable"},
		{name: "only defaults added: not a change", ctx: withRequest(nil),
			newMutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) { s.Default() }},
		{name: "a dry run is still validated", ctx: withRequest(ptr.To(true)), annotations: dryRunAnnotation,
			newMutate: func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) { s.Distribution = "rke2" },
			wantErr:   "spec.template.spec.distribution"},
		{name: "no admission request in the context", ctx: context.Background(), wantErr: "expected an admission.Request inside context"},
	}
	w := &KairosControlPlaneTemplate{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			oldT := kcpTemplate(nil, tc.oldMutate)
			newT := kcpTemplate(tc.annotations, tc.newMutate)
			warnings, err := w.ValidateUpdate(tc.ctx, oldT, newT)
			if len(warnings) != 0 {
				t.Errorf("warnings = %q", warnings)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateUpdate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Errorf("error is neither Invalid nor BadRequest: %v", err)
			}
		})
	}
}

func TestKairosControlPlaneTemplateCreateAndDefault(t *testing.T) {
	w := &KairosControlPlaneTemplate{}
	tmpl := kcpTemplate(nil, nil)
	if err := w.Default(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	s := tmpl.Spec.Template.Spec
	if s.Distribution != bootstrapv1.DistributionK0s || s.Rollout.Strategy.Type != controlplanev1.RollingUpdateStrategyType ||
		s.Rollout.Strategy.RollingUpdate.MaxSurge == nil || s.Rollout.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("defaulted template spec = %+v", s)
	}
	if s.KairosConfigSpec.UserName != "" {
		t.Error("the embedded KairosConfigSpec was defaulted: it must stay as written")
	}
	if _, err := w.ValidateCreate(context.Background(), tmpl); err != nil {
		t.Errorf("ValidateCreate: %v", err)
	}
	bad := kcpTemplate(nil, func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
		s.KairosConfigSpec.Role = bootstrapv1.RoleWorker
	})
	if _, err := w.ValidateCreate(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "spec.template.spec.kairosConfigSpec.role") {
		t.Errorf("worker role accepted: %v", err)
	}
	literal := kcpTemplate(nil, func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
		s.KairosConfigSpec.Hostname = "cp"
	})
	if _, err := w.ValidateCreate(context.Background(), literal); err == nil || !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `spec.template.spec.kairosConfigSpec.hostname: Forbidden: every Machine created from this template would be named "cp"`) {
		t.Errorf("literal hostname accepted: %v", err)
	}
	badNaming := kcpTemplate(nil, func(s *controlplanev1.KairosControlPlaneTemplateResourceSpec) {
		s.MachineNaming.Template = "{{ .random }}-{{ .cluster.name"
	})
	if _, err := w.ValidateCreate(context.Background(), badNaming); err == nil || !strings.Contains(err.Error(), "spec.template.spec.machineNaming.template") ||
		!strings.Contains(err.Error(), "is not a valid Go template") {
		t.Errorf("naming template that does not parse accepted: %v", err)
	}
	badMeta := kcpTemplate(nil, nil)
	badMeta.Spec.Template.ObjectMeta.Labels = map[string]string{"not a label!": "x"}
	if _, err := w.ValidateCreate(context.Background(), badMeta); err == nil || !strings.Contains(err.Error(), "spec.template.metadata") {
		t.Errorf("invalid template metadata accepted: %v", err)
	}
	if warnings, err := w.ValidateDelete(context.Background(), tmpl); warnings != nil || err != nil {
		t.Errorf("ValidateDelete = %v, %v", warnings, err)
	}
}

func TestKairosControlPlaneWebhook(t *testing.T) {
	w := &KairosControlPlane{}
	ctx := context.Background()
	kcp := func(mutate func(s *controlplanev1.KairosControlPlaneSpec)) *controlplanev1.KairosControlPlane {
		spec := validSpec()
		if mutate != nil {
			mutate(&spec)
		}
		return &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp"}, Spec: spec}
	}

	t.Run("default", func(t *testing.T) {
		c := kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = nil })
		if err := w.Default(ctx, c); err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(c.Spec.Replicas, 0) != 1 || c.Spec.Distribution != bootstrapv1.DistributionK0s || c.Spec.Rollout.Strategy.RollingUpdate.MaxSurge == nil {
			t.Errorf("defaulted spec = %+v", c.Spec)
		}
	})

	createCases := []struct {
		name         string
		mutate       func(s *controlplanev1.KairosControlPlaneSpec)
		wantErr      string
		wantWarnings []string
	}{
		{name: "valid"},
		{name: "undefaulted object validates as defaulted", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = nil
			s.Rollout = controlplanev1.KairosControlPlaneRolloutSpec{}
		}},
		{name: "even replicas refused", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](2) },
			wantErr: "spec.replicas: Invalid value: 2: must be odd"},
		{name: "invalid version", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "1.31" },
			wantErr: "spec.version"},
		{name: "duplicate file path",
			mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/hosts", Content: "x"}, {Path: "/etc/hosts", Content: "y"}}
			},
			wantErr: "spec.kairosConfigSpec.files[1].path"},
		{name: "file the renderer writes: refused by the dry render",
			mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Files = []bootstrapv1.File{{Path: "/etc/k0s/k0s.yaml", Content: "x"}}
			},
			wantErr: "spec.kairosConfigSpec.files[0].path: Invalid value: \"/etc/k0s/k0s.yaml\" is written by the renderer"},
		{name: "literal hostname: every control-plane Machine would share it",
			mutate:  func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Hostname = "cp" },
			wantErr: `spec.kairosConfigSpec.hostname: Forbidden: every Machine created from this template would be named "cp": leave it empty so that each node is named after its Machine`},
		{name: "fragment with a literal hostname",
			mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "host", Content: "hostname: cp"}}
			},
			wantErr: `spec.kairosConfigSpec.cloudConfigFragments[0].content: Forbidden: fragment "host" sets the literal hostname "cp"`},
		{name: "hostnamePrefix accepted with provider IDs from the distribution",
			mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.HostnamePrefix = "cp-"
				s.KairosConfigSpec.ProviderID.Source = bootstrapv1.ProviderIDFromDistribution
			}},
		{name: "hostnamePrefix refused with provider IDs from the Machine",
			mutate:  func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.HostnamePrefix = "cp-" },
			wantErr: `spec.kairosConfigSpec.hostnamePrefix: Forbidden: with providerID.source Machine (the default) each node is named after its Machine`},
		// The naming template is rendered as the controller renders it (desiredstate.MachineName).
		{name: "naming not a template", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineNaming.Template = "{{ .random }}-{{ .cluster.name"
		},
			wantErr: "spec.machineNaming.template: Invalid value: \"{{ .random }}-{{ .cluster.name\": is not a valid Go template"},
		{name: "naming renders an invalid name", mutate: func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineNaming.Template = "{{ .random }}_X" },
			wantErr: "spec.machineNaming.template: Invalid value: \"{{ .random }}_X\": renders \"abcde_X\", which is not a valid Machine name"},
		{name: "naming uses an unknown key", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineNaming.Template = "{{ .random }}-{{ .cluster.nam }}"
		},
			wantErr: "use .cluster.name, .kairosControlPlane.name and .random"},
		{name: "naming template", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.MachineNaming.Template = "{{ .cluster.name }}-cp-{{ .random }}"
		}},
		// The single-node edge cluster: it can only change in place, which the warning says (a
		// rollout that cannot be in place waits: TestInPlaceSingleReplicaWithoutSurge).
		{name: "one replica without surge: accepted with a warning", mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
			s.Replicas = ptr.To[int32](1)
			s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
		}, wantWarnings: []string{"spec.rollout.strategy.rollingUpdate.maxSurge: 0 with 1 replica: only changes that can be made in place proceed"}},
		{name: "template reference: no dry render of the empty inline spec",
			mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
				s.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
			}},
	}
	for _, tc := range createCases {
		t.Run("create "+tc.name, func(t *testing.T) {
			warnings, err := w.ValidateCreate(ctx, kcp(tc.mutate))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ValidateCreate: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !apierrors.IsInvalid(err)) {
				t.Fatalf("error = %v, want Invalid with %q", err, tc.wantErr)
			}
			if len(warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings = %q, want %q", warnings, tc.wantWarnings)
			}
			for i, want := range tc.wantWarnings {
				if !strings.Contains(warnings[i], want) {
					t.Errorf("warning = %q, want %q", warnings[i], want)
				}
			}
		})
	}

	t.Run("update", func(t *testing.T) {
		old := kcp(nil)
		if _, err := w.ValidateUpdate(ctx, old, kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.32.0" })); err != nil {
			t.Errorf("minor upgrade refused: %v", err)
		}
		_, err := w.ValidateUpdate(ctx, old, kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = "v1.33.0" }))
		if err == nil || !strings.Contains(err.Error(), "cannot skip a minor version") {
			t.Errorf("skipping a minor: %v", err)
		}
		_, err = w.ValidateUpdate(ctx, old, kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = bootstrapv1.DistributionK3s }))
		if err == nil || !strings.Contains(err.Error(), "spec.distribution") {
			t.Errorf("distribution change: %v", err)
		}
		_, err = w.ValidateUpdate(ctx, old, kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.Hostname = "cp" }))
		if err == nil || !strings.Contains(err.Error(), "spec.kairosConfigSpec.hostname: Forbidden") {
			t.Errorf("literal hostname on update: %v", err)
		}
		// An object stored before distribution was defaulted compares as k0s.
		undefaulted := kcp(nil)
		undefaulted.Spec.Distribution = ""
		if _, err := w.ValidateUpdate(ctx, undefaulted, kcp(func(s *controlplanev1.KairosControlPlaneSpec) { s.Distribution = bootstrapv1.DistributionK0s })); err != nil {
			t.Errorf("defaulting the distribution refused: %v", err)
		}
	})

	if warnings, err := w.ValidateDelete(ctx, kcp(nil)); warnings != nil || err != nil {
		t.Errorf("ValidateDelete = %v, %v", warnings, err)
	}
}

// The on-demand snapshot request annotation: a value the nodes can compare and store without
// quoting, and only on a control plane with snapshots, on create and on update, refused at the
// annotation with the fix.
func TestEtcdSnapshotRequestAnnotation(t *testing.T) {
	w := &KairosControlPlane{}
	ctx := context.Background()
	const field = "metadata.annotations[controlplane.cluster.x-k8s.io/etcd-snapshot-request]"
	kcp := func(value string, snapshots bool) *controlplanev1.KairosControlPlane {
		c := &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp",
			Annotations: map[string]string{controlplanev1.EtcdSnapshotRequestAnnotation: value}}, Spec: validSpec()}
		if snapshots {
			c.Spec.Etcd.Snapshots = &bootstrapv1.EtcdSnapshots{Schedule: "0 * * * *", Retention: ptr.To[int32](3), S3: bootstrapv1.EtcdSnapshotS3{
				Endpoint: "s3.example.com", Bucket: "site-backups", Region: "eu-west-1", CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
			}}
		}
		return c
	}
	for _, tc := range []struct {
		name, value string
		snapshots   bool
		typ         metav1.CauseType
		detail      string
	}{
		{name: "a timestamp", value: "2026-11-29T22:40:00Z", snapshots: true},
		{name: "a shell expansion", value: "$(reboot)", snapshots: true, typ: metav1.CauseTypeFieldValueInvalid,
			detail: "must be 1-63 letters, digits, '.', '_', ':' or '-', a new value for each request: for example the time, $(date -u +%Y%m%dT%H%M%SZ)"},
		{name: "empty", value: "", snapshots: true, typ: metav1.CauseTypeFieldValueInvalid,
			detail: "must be 1-63 letters, digits, '.', '_', ':' or '-', a new value for each request: for example the time, $(date -u +%Y%m%dT%H%M%SZ)"},
		{name: "without snapshots", value: "r1", typ: metav1.CauseTypeForbidden,
			detail: "on-demand etcd snapshots need spec.etcd.snapshots (the store to upload them to): set it first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, createErr := w.ValidateCreate(ctx, kcp(tc.value, tc.snapshots))
			old := kcp("", tc.snapshots)
			delete(old.Annotations, controlplanev1.EtcdSnapshotRequestAnnotation)
			_, updateErr := w.ValidateUpdate(ctx, old, kcp(tc.value, tc.snapshots))
			for what, err := range map[string]error{"create": createErr, "update": updateErr} {
				switch {
				case tc.detail == "" && err != nil:
					t.Errorf("%s refused: %v", what, err)
				case tc.detail != "" && !causeAt(err, field, tc.typ, tc.detail):
					t.Errorf("%s: %v, want %s at %s: %s", what, err, tc.typ, field, tc.detail)
				}
			}
		})
	}
}
