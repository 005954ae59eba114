package webhooks

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

const testNS = "team-a"

var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{autoscalingv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// validSpec is a KairosControlPlane spec that validates without warnings.
func validSpec() controlplanev1.KairosControlPlaneSpec {
	return controlplanev1.KairosControlPlaneSpec{
		Replicas: ptr.To[int32](3),
		Version:  "v1.31.2",
		MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachineTemplate", Name: "cp"},
		}},
		KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "s3cret"},
	}
}

func scaleRequest(t *testing.T, name string, replicas int32) admission.Request {
	t.Helper()
	scale := &autoscalingv1.Scale{
		TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
	}
	raw, err := json.Marshal(scale)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         "uid",
		Kind:        metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
		Resource:    metav1.GroupVersionResource{Group: controlplanev1.GroupVersion.Group, Version: controlplanev1.GroupVersion.Version, Resource: "kairoscontrolplanes"},
		SubResource: "scale",
		Namespace:   testNS,
		Name:        name,
		Operation:   admissionv1.Update,
		Object:      runtime.RawExtension{Raw: raw},
	}}
}

func TestScaleValidator(t *testing.T) {
	surge := func(n int) *intstr.IntOrString { v := intstr.FromInt(n); return &v }
	cases := []struct {
		name string
		// spec is stored as is: the validator defaults it itself.
		spec         func(s *controlplanev1.KairosControlPlaneSpec)
		replicas     int32
		req          func(r *admission.Request)
		wantAllowed  bool
		wantCode     int32
		wantMessage  string
		wantWarnings []string
	}{
		{name: "odd replicas", replicas: 5, wantAllowed: true},
		{name: "scale to 1", replicas: 1, wantAllowed: true},
		{name: "even replicas: refused", replicas: 4, wantCode: http.StatusForbidden,
			wantMessage: "spec.replicas: Invalid value: 4: must be odd: 4 etcd members tolerate no more failures than 3 and need one more member for quorum; use 3 or 5"},
		{name: "zero replicas", replicas: 0, wantCode: http.StatusForbidden,
			wantMessage: "spec.replicas: Invalid value: 0: must be at least 1"},
		{name: "maxSurge 0 with 2 replicas", replicas: 2, wantCode: http.StatusForbidden,
			spec:        func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0) },
			wantMessage: "maxSurge 0 removes a Machine before replacing it, which with 2 replicas loses etcd quorum"},
		{name: "maxSurge 0 with 3 replicas", replicas: 3, wantAllowed: true,
			spec: func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.Strategy.RollingUpdate.MaxSurge = surge(0) }},
		{name: "maxSurge 1 (default) with 2 replicas: refused for being even", replicas: 2, wantCode: http.StatusForbidden,
			spec: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Rollout = controlplanev1.KairosControlPlaneRolloutSpec{}
			},
			wantMessage: "must be odd"},
		{name: "replicas unset in the stored spec", replicas: 3, wantAllowed: true,
			spec: func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = nil }},
		{name: "stored spec with the default password: its warning too", replicas: 3, wantAllowed: true,
			spec:         func(s *controlplanev1.KairosControlPlaneSpec) { s.KairosConfigSpec.UserPassword = "" },
			wantWarnings: []string{"well-known development password"}},
		{name: "stored naming template that cannot name a Machine", replicas: 3, wantCode: http.StatusForbidden,
			spec:        func(s *controlplanev1.KairosControlPlaneSpec) { s.MachineNaming.Template = "{{ .random }}_X" },
			wantMessage: "spec.machineNaming.template"},
		{name: "unknown control plane", replicas: 3, wantCode: http.StatusInternalServerError,
			req:         func(r *admission.Request) { r.Name = "missing" },
			wantMessage: "reading KairosControlPlane missing"},
		{name: "not a Scale", replicas: 3, wantCode: http.StatusBadRequest,
			req:         func(r *admission.Request) { r.Object.Raw = []byte("{not json") },
			wantMessage: "decoding the Scale"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			if tc.spec != nil {
				tc.spec(&spec)
			}
			kcp := &controlplanev1.KairosControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp"}, Spec: spec}
			v := &ScaleValidator{
				Client:  fake.NewClientBuilder().WithScheme(testScheme).WithObjects(kcp).Build(),
				decoder: admission.NewDecoder(testScheme),
			}
			req := scaleRequest(t, "cp", tc.replicas)
			if tc.req != nil {
				tc.req(&req)
			}
			resp := v.Handle(t.Context(), req)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v (%+v), want %v", resp.Allowed, resp.Result, tc.wantAllowed)
			}
			if !tc.wantAllowed {
				if resp.Result == nil || resp.Result.Code != tc.wantCode || !strings.Contains(resp.Result.Message, tc.wantMessage) {
					t.Errorf("result = %+v, want code %d with %q", resp.Result, tc.wantCode, tc.wantMessage)
				}
			}
			if len(resp.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings = %q, want %q", resp.Warnings, tc.wantWarnings)
			}
			for i, w := range tc.wantWarnings {
				if !strings.Contains(resp.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, resp.Warnings[i], w)
				}
			}
			// The validator never writes.
			stored := &controlplanev1.KairosControlPlane{}
			if err := v.Client.Get(t.Context(), client.ObjectKeyFromObject(kcp), stored); err != nil {
				t.Fatal(err)
			}
			if (stored.Spec.Replicas == nil) != (spec.Replicas == nil) || stored.Spec.Replicas != nil && *stored.Spec.Replicas != *spec.Replicas {
				t.Error("the stored replicas changed")
			}
		})
	}
}
