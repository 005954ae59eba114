package clusterctl

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestInstalledProvidersRun runs the installed providers: both managers, built from this
// repository, run with their installed Deployment's args under their ServiceAccount's
// identity, behind their installed webhook configurations. Admission defaults and rejects
// through the installed webhooks; a KairosControlPlane creates the cluster certificates, the
// kubeconfig and its first Machine; the bootstrap provider renders data for that Machine and
// for a stand-alone control-plane Machine. Any request refused for lack of permissions fails
// the test: the shipped RBAC must be enough.
func TestInstalledProvidersRun(t *testing.T) {
	m := startManagement(t, "management")
	m.init(t, m.initOptions(newVersion, true))
	m.serveCoreWebhooks(t)
	bootstrap := m.startManager(t, bootstrapProvider)
	controlPlane := m.startManager(t, controlPlaneProvider)
	ns := m.createNamespace(t, "workloads")
	ctx := context.Background()

	// The managers' requests are authorized as their ServiceAccounts, not as the administrator
	// whose credentials carry the impersonation.
	t.Run("identity", func(t *testing.T) {
		for _, mp := range []*managerProcess{bootstrap, controlPlane} {
			checkIdentity(t, mp)
		}
	})

	t.Run("admission", func(t *testing.T) {
		// Defaulting: the CRDs have no defaults, so these values come from the webhook.
		config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaulted"}}
		if err := m.Client.Create(ctx, config); err != nil {
			t.Fatalf("creating an empty KairosConfig: %v", err)
		}
		if config.Spec.Role != bootstrapv1.RoleWorker || config.Spec.Distribution != bootstrapv1.DistributionK0s ||
			config.Spec.UserName != bootstrapv1.DefaultUserName || len(config.Spec.UserGroups) == 0 {
			t.Errorf("KairosConfig not defaulted by the webhook: %+v", config.Spec)
		}

		invalid := &bootstrapv1.KairosConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "invalid"},
			Spec:       bootstrapv1.KairosConfigSpec{UserName: "Not A User"},
		}
		expectWebhookDenial(t, m.Client.Create(ctx, invalid), "validation.kairosconfig.bootstrap.cluster.x-k8s.io", "spec.userName", "must be a Linux user name")

		kcp := &controlplanev1.KairosControlPlane{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaulted"},
			Spec: controlplanev1.KairosControlPlaneSpec{
				Version: kubernetesVersion,
				MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: "none"},
				}},
			},
		}
		if err := m.Client.Create(ctx, kcp); err != nil {
			t.Fatalf("creating a KairosControlPlane: %v", err)
		}
		if ptr.Deref(kcp.Spec.Replicas, 0) != controlplanev1.DefaultReplicas || kcp.Spec.Distribution != bootstrapv1.DistributionK0s ||
			kcp.Spec.Rollout.Strategy.Type != controlplanev1.RollingUpdateStrategyType {
			t.Errorf("KairosControlPlane not defaulted by the webhook: %+v", kcp.Spec)
		}
		invalidKCP := kcp.DeepCopy()
		invalidKCP.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "invalid"}
		invalidKCP.Spec.Version = "1.31"
		expectWebhookDenial(t, m.Client.Create(ctx, invalidKCP), "validation.kairoscontrolplane.controlplane.cluster.x-k8s.io", "spec.version", "leading v")
		for _, o := range []client.Object{config, kcp} {
			if err := m.Client.Delete(ctx, o); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("reconcile", func(t *testing.T) {
		s := m.buildScenario(t, ns)

		kcp := s.ControlPlane
		if !conditions.IsTrue(kcp, controlplanev1.CertificatesAvailableCondition) {
			t.Errorf("KairosControlPlane condition %s is not true: %+v", controlplanev1.CertificatesAvailableCondition, kcp.Status.Conditions)
		}
		for name, machine := range s.Machines {
			data := s.Data[name]
			if !strings.Contains(string(data.Data["value"]), s.Managed.Spec.ControlPlaneEndpoint.Host) {
				t.Errorf("bootstrap data of Machine %s does not mention the control-plane endpoint", name)
			}
			if machine.Spec.ClusterName == s.Standalone.Name {
				// The bootstrap provider created the certificates and the k3s token of the
				// stand-alone cluster, owned by the KairosConfig.
				for _, n := range []string{s.Standalone.Name + "-ca", s.Standalone.Name + "-k3s-token"} {
					sec := &corev1.Secret{}
					if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, sec); err != nil {
						t.Errorf("Secret %s of the stand-alone cluster: %v", n, err)
					}
				}
			}
		}
	})

	bootstrap.checkRunning(t)
	controlPlane.checkRunning(t)
	// Stopping checks the managers' output for refused requests.
	bootstrap.stop(t)
	controlPlane.stop(t)
}

// checkIdentity asks the API server, with the manager's kubeconfig, who it is and whether it
// may delete Clusters (no provider may).
func checkIdentity(t *testing.T, mp *managerProcess) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", mp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	ns := mp.provider.Namespace
	if u := review.Status.UserInfo; u.Username != mp.User || !contains(u.Groups, "system:serviceaccounts:"+ns) {
		t.Errorf("%s: the API server sees user %q groups %v, want %s in system:serviceaccounts:%s", mp.Name, u.Username, u.Groups, mp.User, ns)
	}
	access := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Group: clusterv1.GroupVersion.Group, Resource: "clusters"},
	}}
	if err := c.Create(ctx, access); err != nil {
		t.Fatal(err)
	}
	if access.Status.Allowed {
		t.Errorf("%s may delete Clusters: the test would not enforce the shipped RBAC", mp.Name)
	}
}

// expectWebhookDenial checks that err is the API server relaying a webhook's refusal, naming
// the field and with the webhook's message.
func expectWebhookDenial(t *testing.T, err error, webhook, field, message string) {
	t.Helper()
	if err == nil {
		t.Errorf("created an object %s should refuse (%s: %s)", webhook, field, message)
		return
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Errorf("error is not a validation error: %v", err)
	}
	for _, want := range []string{`admission webhook "` + webhook + `" denied the request`, field, message} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q: %v", want, err)
		}
	}
}
