package webhooks

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/dryrun"
	"github.com/kairos-capi/kairos-capi/common/provider/validation"
	"github.com/kairos-capi/kairos-capi/common/render"
)

func controlPlane(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, Distribution: dist, KubernetesVersion: "v1.31.2", UserPassword: "s3cret"}
}

func worker(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: dist, KubernetesVersion: "v1.31.2", UserPassword: "s3cret"}
}

func kairosConfig(spec bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfig {
	return &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m-0"}, Spec: spec}
}

// statusCauses returns the field errors an Invalid API error carries.
func statusCauses(t *testing.T, err error) []metav1.StatusCause {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v is not an Invalid API error", err)
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		t.Fatalf("error %v has no details", err)
	}
	return status.Status().Details.Causes
}

func hasCause(causes []metav1.StatusCause, fieldPath string, typ metav1.CauseType, contains string) bool {
	for _, c := range causes {
		if c.Field == fieldPath && c.Type == typ && strings.Contains(c.Message, contains) {
			return true
		}
	}
	return false
}

func TestDefault(t *testing.T) {
	c := &bootstrapv1.KairosConfig{}
	if err := (&KairosConfig{}).Default(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Role != bootstrapv1.RoleWorker || c.Spec.Distribution != bootstrapv1.DistributionK0s || c.Spec.UserName != "kairos" {
		t.Errorf("KairosConfig not defaulted: %+v", c.Spec)
	}
	tpl := &bootstrapv1.KairosConfigTemplate{}
	if err := (&KairosConfigTemplate{}).Default(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	if tpl.Spec.Template.Spec.Role != bootstrapv1.RoleWorker || len(tpl.Spec.Template.Spec.UserGroups) != 1 {
		t.Errorf("KairosConfigTemplate not defaulted: %+v", tpl.Spec.Template.Spec)
	}
}

func TestValidateCreate(t *testing.T) {
	w := &KairosConfig{}
	warnings, err := w.ValidateCreate(context.Background(), kairosConfig(controlPlane(bootstrapv1.DistributionK0s)))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("valid object: warnings %v, error %v", warnings, err)
	}

	// Admission validates what will be stored: defaults count even when the caller skipped
	// the mutating webhook.
	warnings, err = w.ValidateCreate(context.Background(), kairosConfig(bootstrapv1.KairosConfigSpec{KubernetesVersion: "v1.31.2"}))
	if err != nil {
		t.Fatalf("an undefaulted, valid object: %v", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "development password") {
		t.Fatalf("warnings = %q, want the default-password warning", warnings)
	}

	bad := controlPlane(bootstrapv1.DistributionK0s)
	bad.KubernetesVersion = "1.31"
	bad.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
	_, err = w.ValidateCreate(context.Background(), kairosConfig(bad))
	if err == nil {
		t.Fatal("an invalid object was accepted")
	}
	if !strings.HasPrefix(err.Error(), `KairosConfig.bootstrap.cluster.x-k8s.io "m-0" is invalid`) {
		t.Errorf("error = %q", err)
	}
	causes := statusCauses(t, err)
	if !hasCause(causes, "spec.kubernetesVersion", metav1.CauseTypeFieldValueInvalid, "for example v1.31.2") ||
		!hasCause(causes, "spec.userPassword", metav1.CauseTypeForbidden, "keep only userPasswordSecretRef") {
		t.Errorf("causes = %+v", causes)
	}

	if w, err := w.ValidateDelete(context.Background(), kairosConfig(bad)); w != nil || err != nil {
		t.Errorf("ValidateDelete = %v, %v", w, err)
	}
}

func TestValidateUpdateImmutableOnceDataExists(t *testing.T) {
	withData := func(c *bootstrapv1.KairosConfig) *bootstrapv1.KairosConfig {
		c.Status.Initialization.DataSecretCreated = ptr.To(true)
		c.Status.DataSecretName = "m-0"
		return c
	}
	changed := controlPlane(bootstrapv1.DistributionK0s)
	changed.PreCommands = []string{"echo changed"}
	undefaulted := bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, KubernetesVersion: "v1.31.2", UserPassword: "s3cret",
		Install: &bootstrapv1.Install{}, CloudConfigFragments: []bootstrapv1.CloudConfigFragment{{Name: "f", Content: "a: b\n"}}}
	defaulted := *undefaulted.DeepCopy()
	defaulted.Default()

	tests := []struct {
		name          string
		old, new      *bootstrapv1.KairosConfig
		wantImmutable bool
	}{
		{"spec change before data exists", kairosConfig(controlPlane(bootstrapv1.DistributionK0s)), kairosConfig(changed), false},
		{"spec change once data exists", withData(kairosConfig(controlPlane(bootstrapv1.DistributionK0s))), kairosConfig(changed), true},
		{"spec change with only the deprecated dataSecretName", func() *bootstrapv1.KairosConfig {
			c := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
			c.Status.DataSecretName = "m-0"
			return c
		}(), kairosConfig(changed), true},
		{"spec change with dataSecretCreated only", func() *bootstrapv1.KairosConfig {
			c := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
			c.Status.Initialization.DataSecretCreated = ptr.To(true)
			return c
		}(), kairosConfig(changed), true},
		{"dataSecretCreated false is no data", func() *bootstrapv1.KairosConfig {
			c := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
			c.Status.Initialization.DataSecretCreated = ptr.To(false)
			return c
		}(), kairosConfig(changed), false},
		{"no spec change once data exists", withData(kairosConfig(controlPlane(bootstrapv1.DistributionK0s))), kairosConfig(controlPlane(bootstrapv1.DistributionK0s)), false},
		{"only defaults differ (old stored before defaults existed)", withData(kairosConfig(undefaulted)), kairosConfig(defaulted), false},
		{"only defaults differ (new not defaulted)", withData(kairosConfig(defaulted)), kairosConfig(undefaulted), false},
		{"metadata change once data exists", withData(kairosConfig(controlPlane(bootstrapv1.DistributionK0s))), func() *bootstrapv1.KairosConfig {
			c := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
			c.Labels = map[string]string{"team": "a"}
			return c
		}(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&KairosConfig{}).ValidateUpdate(context.Background(), tc.old, tc.new)
			if !tc.wantImmutable {
				if err != nil {
					t.Fatalf("update rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("update accepted")
			}
			causes := statusCauses(t, err)
			if len(causes) != 1 || !hasCause(causes, "spec.preCommands", metav1.CauseTypeForbidden, "is immutable once the bootstrap data exists") ||
				!strings.Contains(causes[0].Message, "create a new KairosConfig for a new Machine") {
				t.Fatalf("causes = %+v", causes)
			}
			if tc.old.Status.DataSecretName != "" && !strings.Contains(causes[0].Message, "(Secret m-0)") {
				t.Errorf("message %q does not name the data Secret", causes[0].Message)
			}
		})
	}
}

// TestValidateUpdateInPlaceFields: once the data exists, spec.image (the field Cluster API's
// in-place update changes, bootstrap-config contract "support for in-place changes") may change;
// every other change is refused on the field that changed, and the message says what may change.
func TestValidateUpdateInPlaceFields(t *testing.T) {
	const (
		imageA = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k0sv1.31.2-k0s.0"
		imageB = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k0sv1.31.2-k0s.0"
	)
	old := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
	old.Spec.Image = imageA
	old.Status.Initialization.DataSecretCreated = ptr.To(true)

	for _, img := range []string{imageB, ""} {
		changed := old.DeepCopy()
		changed.Spec.Image = img
		if _, err := (&KairosConfig{}).ValidateUpdate(context.Background(), old, changed); err != nil {
			t.Errorf("image %q -> %q refused: %v", imageA, img, err)
		}
	}

	changed := old.DeepCopy()
	changed.Spec.Image = imageB
	changed.Spec.PreCommands = []string{"echo changed"}
	changed.Spec.UserGroups = []string{"admin", "wheel"}
	_, err := (&KairosConfig{}).ValidateUpdate(context.Background(), old, changed)
	causes := statusCauses(t, err)
	if len(causes) != 2 || !hasCause(causes, "spec.preCommands", metav1.CauseTypeForbidden, "only spec.image change in place") ||
		!hasCause(causes, "spec.userGroups", metav1.CauseTypeForbidden, "immutable once the bootstrap data exists") {
		t.Fatalf("causes = %+v, want spec.preCommands and spec.userGroups refused (and spec.image not)", causes)
	}

	// A new image is still validated: another distribution's image is refused.
	changed = old.DeepCopy()
	changed.Spec.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
	_, err = (&KairosConfig{}).ValidateUpdate(context.Background(), old, changed)
	if causes := statusCauses(t, err); len(causes) != 1 || !hasCause(causes, "spec.image", metav1.CauseTypeFieldValueInvalid, "distribution is k0s") {
		t.Fatalf("causes = %+v", causes)
	}
}

// TestImmutableMessageNamesTheSecret: with status.initialization.dataSecretCreated true but no
// (deprecated) status.dataSecretName, the immutability message still names the data Secret
// (after its KairosConfig), not "(Secret )".
func TestImmutableMessageNamesTheSecret(t *testing.T) {
	old := kairosConfig(controlPlane("k0s"))
	old.Status.Initialization.DataSecretCreated = ptr.To(true)
	changed := controlPlane("k0s")
	changed.PreCommands = []string{"echo changed"}
	_, err := (&KairosConfig{}).ValidateUpdate(context.Background(), old, kairosConfig(changed))
	if err == nil || strings.Contains(err.Error(), "(Secret )") {
		t.Fatalf("error = %v, want one naming the data Secret", err)
	}
}

func TestValidateUpdateStillValidates(t *testing.T) {
	old := kairosConfig(controlPlane(bootstrapv1.DistributionK0s))
	old.Status.Initialization.DataSecretCreated = ptr.To(true)
	bad := controlPlane(bootstrapv1.DistributionK0s)
	bad.Hostname = "Bad_Host"
	_, err := (&KairosConfig{}).ValidateUpdate(context.Background(), old, kairosConfig(bad))
	causes := statusCauses(t, err)
	if !hasCause(causes, "spec.hostname", metav1.CauseTypeForbidden, "immutable") || !hasCause(causes, "spec.hostname", metav1.CauseTypeFieldValueInvalid, "RFC 1123") {
		t.Fatalf("causes = %+v, want immutability and validation", causes)
	}

	// Without data, an invalid update is rejected for its content only.
	_, err = (&KairosConfig{}).ValidateUpdate(context.Background(), kairosConfig(controlPlane(bootstrapv1.DistributionK0s)), kairosConfig(bad))
	causes = statusCauses(t, err)
	if len(causes) != 1 || causes[0].Field != "spec.hostname" {
		t.Fatalf("causes = %+v", causes)
	}
}

func template(spec bootstrapv1.KairosConfigSpec, annotations map[string]string) *bootstrapv1.KairosConfigTemplate {
	return &bootstrapv1.KairosConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "workers", Annotations: annotations},
		Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: spec}},
	}
}

func requestContext(dryRun *bool) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update,
		DryRun:    dryRun,
	}})
}

func TestTemplateValidateUpdate(t *testing.T) {
	dryRunAnnotation := map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	changed := worker(bootstrapv1.DistributionK0s)
	changed.PostCommands = []string{"echo changed"}
	undefaulted := bootstrapv1.KairosConfigSpec{KubernetesVersion: "v1.31.2", UserPassword: "s3cret"}
	defaulted := *undefaulted.DeepCopy()
	defaulted.Default()

	tests := []struct {
		name          string
		ctx           context.Context
		old, new      *bootstrapv1.KairosConfigTemplate
		wantImmutable bool
	}{
		{"change", requestContext(nil), template(worker(bootstrapv1.DistributionK0s), nil), template(changed, nil), true},
		{"change in a non-dry-run request", requestContext(ptr.To(false)), template(worker(bootstrapv1.DistributionK0s), nil), template(changed, dryRunAnnotation), true},
		{"dry run without the topology annotation", requestContext(ptr.To(true)), template(worker(bootstrapv1.DistributionK0s), nil), template(changed, nil), true},
		{"topology dry run", requestContext(ptr.To(true)), template(worker(bootstrapv1.DistributionK0s), nil), template(changed, dryRunAnnotation), false},
		{"topology dry run with the annotation on the old object only", requestContext(ptr.To(true)),
			template(worker(bootstrapv1.DistributionK0s), dryRunAnnotation), template(changed, nil), true},
		{"no change", requestContext(nil), template(worker(bootstrapv1.DistributionK0s), nil), template(worker(bootstrapv1.DistributionK0s), nil), false},
		{"only defaults differ", requestContext(nil), template(undefaulted, nil), template(defaulted, nil), false},
		{"metadata change", requestContext(nil), template(worker(bootstrapv1.DistributionK0s), nil),
			template(worker(bootstrapv1.DistributionK0s), map[string]string{"note": "x"}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&KairosConfigTemplate{}).ValidateUpdate(tc.ctx, tc.old, tc.new)
			if !tc.wantImmutable {
				if err != nil {
					t.Fatalf("update rejected: %v", err)
				}
				return
			}
			causes := statusCauses(t, err)
			if len(causes) != 1 || !hasCause(causes, "spec.template.spec", metav1.CauseTypeForbidden, "KairosConfigTemplate spec is immutable: create a new template") {
				t.Fatalf("causes = %+v", causes)
			}
			if !strings.HasPrefix(err.Error(), `KairosConfigTemplate.bootstrap.cluster.x-k8s.io "workers" is invalid`) {
				t.Errorf("error = %q", err)
			}
		})
	}

	t.Run("no admission request", func(t *testing.T) {
		_, err := (&KairosConfigTemplate{}).ValidateUpdate(context.Background(), template(worker(bootstrapv1.DistributionK0s), nil), template(changed, nil))
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "expected an admission.Request inside context") {
			t.Fatalf("error = %v, want a BadRequest", err)
		}
	})
	t.Run("topology dry run still validates", func(t *testing.T) {
		bad := changed.DeepCopy()
		bad.SingleNode = true
		_, err := (&KairosConfigTemplate{}).ValidateUpdate(requestContext(ptr.To(true)), template(worker(bootstrapv1.DistributionK0s), nil), template(*bad, dryRunAnnotation))
		causes := statusCauses(t, err)
		if len(causes) != 1 || causes[0].Field != "spec.template.spec.singleNode" {
			t.Fatalf("causes = %+v", causes)
		}
	})
}

func TestTemplateValidateCreate(t *testing.T) {
	w := &KairosConfigTemplate{}
	if _, err := w.ValidateCreate(context.Background(), template(worker(bootstrapv1.DistributionK3s), nil)); err != nil {
		t.Fatalf("valid template: %v", err)
	}
	bad := template(worker(bootstrapv1.DistributionK3s), nil)
	bad.Spec.Template.ObjectMeta.Labels = map[string]string{"not a label!": "x"}
	bad.Spec.Template.Spec.Files = []bootstrapv1.File{{Path: "relative", Content: "x"}}
	_, err := w.ValidateCreate(context.Background(), bad)
	causes := statusCauses(t, err)
	var fields []string
	for _, c := range causes {
		fields = append(fields, c.Field)
	}
	if len(causes) != 2 || !strings.HasPrefix(fields[0], "spec.template.metadata.labels") || fields[1] != "spec.template.spec.files[0].path" {
		t.Fatalf("causes on %v, want the template's metadata labels and spec.template.spec.files[0].path", fields)
	}

	warnings, err := w.ValidateCreate(context.Background(), template(bootstrapv1.KairosConfigSpec{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "spec.template.spec.userPassword") {
		t.Fatalf("warnings = %q", warnings)
	}
	if w, err := w.ValidateDelete(context.Background(), bad); w != nil || err != nil {
		t.Errorf("ValidateDelete = %v, %v", w, err)
	}
}

func defaulted(s bootstrapv1.KairosConfigSpec) *bootstrapv1.KairosConfigSpec {
	s.Default()
	return &s
}

func TestDryRender(t *testing.T) {
	fragment := func(content string) []bootstrapv1.CloudConfigFragment {
		return []bootstrapv1.CloudConfigFragment{{Name: "user-frag", Content: content}}
	}
	fileAt := func(path string) []bootstrapv1.File { return []bootstrapv1.File{{Path: path, Content: "x"}} }
	with := func(s bootstrapv1.KairosConfigSpec, mutate func(*bootstrapv1.KairosConfigSpec)) bootstrapv1.KairosConfigSpec {
		mutate(&s)
		return s
	}
	cpK0s, cpK3s := controlPlane(bootstrapv1.DistributionK0s), controlPlane(bootstrapv1.DistributionK3s)
	wkK0s, wkK3s := worker(bootstrapv1.DistributionK0s), worker(bootstrapv1.DistributionK3s)

	const at = "spec.template.spec."
	tests := []struct {
		name  string
		spec  bootstrapv1.KairosConfigSpec
		field string   // where the error must be reported
		want  []string // nil: renders
	}{
		{"k0s control plane", cpK0s, "", nil},
		{"k3s control plane", cpK3s, "", nil},
		{"k0s worker", wkK0s, "", nil},
		{"k3s worker", wkK3s, "", nil},
		{"no version: a placeholder version is used", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.KubernetesVersion = "" }), "", nil},

		// Fragments against generated keys, and as a node reads them.
		{"fragment sets the generated hostname", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Hostname = "node-1"
			s.CloudConfigFragments = fragment("hostname: other\n")
		}), at + "cloudConfigFragments[0].content", []string{`key "hostname" is set by both "generated" and fragment "user-frag"`}},
		{"fragment sets the generated install device", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Device: "/dev/sda"}
			s.CloudConfigFragments = fragment("install:\n  device: /dev/sdb\n")
		}), at + "cloudConfigFragments[0].content", []string{`"install.device"`, `fragment "user-frag"`}},
		{"fragment changes the type of a generated key", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = fragment("users: not-a-list\n")
		}), at + "cloudConfigFragments[0].content", []string{`users: must be a YAML list`, `fragment "user-frag"`}},
		{"fragment writes a generated file", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = fragment("stages:\n  boot:\n    - files:\n        - path: " + render.K0sConfigPath + "\n          content: x\n")
		}), at + "cloudConfigFragments[0].content", []string{`file "` + render.K0sConfigPath + `" is written by both "generated" and fragment "user-frag"`}},
		{"fragment with quoted stage file permissions", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = fragment("stages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: \"0644\"\n")
		}), at + "cloudConfigFragments[0].content", []string{"stages.boot[0].files[0].permissions: must be an unquoted YAML integer"}},
		{"fragment redefining the login user", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = fragment("users:\n  - name: kairos\n    passwd: other\n")
		}), at + "cloudConfigFragments[0].content", []string{`users[0]: user "kairos" is already defined by the generated document`}},
		{"fragment setting p2p", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.CloudConfigFragments = fragment("p2p:\n  auto: true\n") }),
			at + "cloudConfigFragments[0].content", []string{"p2p: may not be set by a fragment"}},
		{"fragment adding to generated lists", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.CloudConfigFragments = fragment("users:\n  - name: extra\nstages:\n  boot:\n    - name: mine\n      commands: [\"true\"]\n")
		}), "", nil},
		{"fragment from a Secret is checked when rendering, not at admission", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Hostname = "node-1"
			s.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{{Name: "f", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "frag"}}}
		}), "", nil},

		// User files against generated paths.
		{"file at the k0s config", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K0sConfigPath) }),
			at + "files[0].path", []string{`"` + render.K0sConfigPath + `" is written by the renderer`}},
		{"file at the k0s CA key", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K0sPKIDir + "/ca.key") }),
			at + "files[0].path", []string{render.K0sPKIDir + "/ca.key", "is written by the renderer"}},
		{"file at the k0s worker token", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K0sTokenPath) }),
			at + "files[0].path", []string{render.K0sTokenPath, "is written by the renderer"}},
		{"file at the k3s token", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K3sTokenPath) }),
			at + "files[0].path", []string{render.K3sTokenPath, "is written by the renderer"}},
		{"file at the k3s server CA", with(cpK3s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K3sTLSDir + "/server-ca.crt") }),
			at + "files[0].path", []string{"server-ca.crt", "is written by the renderer"}},
		{"file at the bootstrap script", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.BootstrapScript) }),
			at + "files[0].path", []string{render.BootstrapScript, "is written by the renderer"}},
		{"file at the bootstrap unit", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.BootstrapUnitPath) }),
			at + "files[0].path", []string{render.BootstrapUnitPath, "is written by the renderer"}},
		{"file at the k3s user config", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Config: "node-label: [a=b]\n"}
			s.Files = fileAt(render.K3sUserConfigPath)
		}), at + "files[0].path", []string{render.K3sUserConfigPath, "is written by the renderer"}},
		{"file at the sentinel", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.SentinelPath) }),
			at + "files[0].path", []string{render.SentinelPath, "bootstrap sentinel"}},
		{"file from a Secret at a generated path", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Files = []bootstrapv1.File{{Path: render.K0sTokenPath, ContentFrom: &bootstrapv1.SecretKeyReference{Name: "f"}}}
		}), at + "files[0].path", []string{render.K0sTokenPath, "is written by the renderer"}},
		{"file the other distribution would generate", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt(render.K0sTokenPath) }), "", nil},
		{"file at a free path", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) { s.Files = fileAt("/etc/myapp/config.yaml") }), "", nil},

		// Distribution options the renderer owns, in every spelling, and per role.
		{"k3s config sets the token", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Config: "token: abc\n"}
		}), at + "k3s.config", []string{"token: is managed by kairos-capi"}},
		{"k0s token file with its value in one item", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"--debug", "--token-file /x"}}
		}), at + "k0s.args[1]", []string{"--token-file is managed by kairos-capi"}},
		{"k0s config shorthand", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Args: []string{"-c", "/x"}}
		}), at + "k0s.args[0]", []string{"--config is managed by kairos-capi"}},
		{"k3s server flag on an agent", with(wkK3s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K3s = &bootstrapv1.DistributionOptions{Args: []string{"--disable=traefik"}}
		}), at + "k3s.args[0]", []string{"k3s agent refuses to start"}},
		{"k0s config sets the generated API address", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Config: "spec:\n  api:\n    externalAddress: 10.0.0.1\n"}
		}), at + "k0s.config", []string{"spec.api.externalAddress"}},
		{"k0s config with an unknown field", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Config: "spec:\n  network:\n    podCidr: 10.0.0.0/16\n"}
		}), at + "k0s.config", []string{"spec.network.podCidr: is not a ClusterConfig field"}},
		{"k0s config of another kind", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Config: "kind: Cluster\n"}
		}), at + "k0s.config", []string{"kind Cluster is not ClusterConfig"}},
		{"env value with a newline", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.K0s = &bootstrapv1.DistributionOptions{Env: map[string]string{"A": "x\ny"}}
		}), at + "k0s.env", []string{"the value of A must be a single line"}},
		{"manifest that is no Kubernetes object", with(cpK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Manifests = []bootstrapv1.Manifest{{Name: "m.yaml", Content: "foo: bar\n"}}
		}), at + "manifests[0].content", []string{"documents[0].apiVersion: required"}},
		{"install that stays in the live system", with(wkK0s, func(s *bootstrapv1.KairosConfigSpec) {
			s.Install = &bootstrapv1.Install{Reboot: ptr.To(false)}
		}), "", nil}, // refused by field validation, see TestValidateCreate
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := defaulted(tc.spec)
			if tc.name == "install that stays in the live system" {
				if errs := validation.ValidateKairosConfigSpec(spec, field.NewPath("spec")); len(errs) == 0 {
					t.Fatal("field validation accepts an install without reboot")
				}
				return
			}
			if errs := validation.ValidateKairosConfigSpec(spec, field.NewPath("spec")); len(errs) != 0 {
				t.Fatalf("the case must pass field validation: %v", errs.ToAggregate())
			}
			errs := dryrun.Render(spec, field.NewPath("spec", "template", "spec"))
			if tc.want == nil {
				if len(errs) != 0 {
					t.Fatalf("dryrun.Render: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatal("dryrun.Render accepts the spec")
			}
			for _, e := range errs {
				if e.Field != tc.field || e.Type != field.ErrorTypeInvalid {
					continue
				}
				ok := true
				for _, w := range tc.want {
					ok = ok && strings.Contains(e.Detail, w)
				}
				if !ok {
					continue
				}
				// The value is not echoed: it may be a Secret's content.
				if _, omitted := e.BadValue.(field.OmitValueType); !omitted {
					t.Errorf("error carries a value: %#v", e.BadValue)
				}
				return
			}
			t.Fatalf("no Invalid error at %s containing %q in %v", tc.field, tc.want, errs)
		})
	}
}

func TestDryRenderDoesNotModifyTheSpec(t *testing.T) {
	spec := defaulted(controlPlane(bootstrapv1.DistributionK0s))
	spec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{
		{Name: "a", Position: bootstrapv1.FragmentAppend, ContentFrom: &bootstrapv1.SecretKeyReference{Name: "s", Key: "value"}},
		{Name: "b", Position: bootstrapv1.FragmentAppend, Content: "a: b\n"},
	}
	before := spec.DeepCopy()
	if errs := dryrun.Render(spec, field.NewPath("spec")); len(errs) != 0 {
		t.Fatal(errs)
	}
	if spec.CloudConfigFragments[0].Name != "a" || len(spec.CloudConfigFragments) != 2 || spec.CloudConfigFragments[1].Name != before.CloudConfigFragments[1].Name {
		t.Fatalf("dryrun.Render changed the caller's fragments: %+v", spec.CloudConfigFragments)
	}
}

func TestAdmissionAcceptsAndRejectsThroughTheDryRender(t *testing.T) {
	spec := controlPlane(bootstrapv1.DistributionK0s)
	spec.Files = []bootstrapv1.File{{Path: render.K0sConfigPath, Content: "x"}}
	_, err := (&KairosConfig{}).ValidateCreate(context.Background(), kairosConfig(spec))
	causes := statusCauses(t, err)
	if len(causes) != 1 || causes[0].Field != "spec.files[0].path" || !strings.Contains(causes[0].Message, "is written by the renderer") {
		t.Fatalf("causes = %+v", causes)
	}
}

// TestSSHKeyWithTrailingNewlineIsAdmitted: spec.sshPublicKey validation tolerates a trailing
// newline (what `sshPublicKey: |` or `$(cat id.pub)` produce), and so does the dry render
// admission runs.
func TestSSHKeyWithTrailingNewlineIsAdmitted(t *testing.T) {
	spec := worker("k0s")
	spec.SSHPublicKey = "ssh-ed25519 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 51)) + " me@host\n"
	if _, err := (&KairosConfig{}).ValidateCreate(context.Background(), kairosConfig(spec)); err != nil {
		t.Fatalf("a valid key with a trailing newline is rejected: %v", err)
	}
}

func TestAdmissionErrorsNeverContainSecrets(t *testing.T) {
	const marker = "CANARY"
	password := "pw-" + marker + "-31f"
	k3sToken := "K10" + strings.Repeat("ef", 32) + "::server:" + marker + "tok"
	specs := map[string]bootstrapv1.KairosConfigSpec{}
	add := func(name string, s bootstrapv1.KairosConfigSpec, mutate func(*bootstrapv1.KairosConfigSpec)) {
		mutate(&s)
		specs[name] = s
	}
	add("password with a newline (refused by the renderer)", controlPlane(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password + "\nsecond-line-" + marker
	})
	add("password and Secret", controlPlane(bootstrapv1.DistributionK3s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password
		s.UserPasswordSecretRef = &bootstrapv1.SecretKeyReference{Name: "pw"}
	})
	add("k3s token on a control plane", controlPlane(bootstrapv1.DistributionK3s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password
		s.WorkerToken = k3sToken
	})
	add("k3s token on k0s", worker(bootstrapv1.DistributionK0s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password
		s.WorkerToken = k3sToken
	})
	add("plain token on k3s", worker(bootstrapv1.DistributionK3s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password
		s.WorkerToken = marker + "-plain"
	})
	add("token with a newline inside", worker(bootstrapv1.DistributionK3s), func(s *bootstrapv1.KairosConfigSpec) {
		s.UserPassword = password
		s.WorkerToken = "K10" + strings.Repeat("ef", 32) + "::server:" + marker + "\nx"
	})
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			warnings, err := (&KairosConfig{}).ValidateCreate(context.Background(), kairosConfig(spec))
			if err == nil {
				t.Fatal("accepted")
			}
			texts := append([]string{err.Error()}, warnings...)
			for _, c := range statusCauses(t, err) {
				texts = append(texts, c.Message)
			}
			for _, text := range texts {
				if strings.Contains(text, marker) {
					t.Errorf("admission message leaks secret material: %q", text)
				}
			}
		})
	}
}

// TestDryRenderNamesTheFragmentIndex: a fragment read from a Secret (unknown at admission)
// before an inline one does not shift the index an error names.
func TestDryRenderNamesTheFragmentIndex(t *testing.T) {
	spec := defaulted(controlPlane(bootstrapv1.DistributionK0s))
	spec.CloudConfigFragments = []bootstrapv1.CloudConfigFragment{
		{Name: "from-secret", Position: bootstrapv1.FragmentAppend, ContentFrom: &bootstrapv1.SecretKeyReference{Name: "s", Key: "value"}},
		{Name: "inline", Position: bootstrapv1.FragmentAppend, Content: "p2p:\n  auto: true\n"},
	}
	errs := dryrun.Render(spec, field.NewPath("spec"))
	if len(errs) != 1 || errs[0].Field != "spec.cloudConfigFragments[1].content" || !strings.Contains(errs[0].Detail, `fragment "inline"`) {
		t.Fatalf("errors = %v, want one on spec.cloudConfigFragments[1].content naming fragment \"inline\"", errs)
	}
}
