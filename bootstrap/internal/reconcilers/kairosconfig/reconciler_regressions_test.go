package kairosconfig

// Failing test for a product bug; not part of the delivered suite. Copy into
// bootstrap/internal/reconcilers/kairosconfig/ to reproduce.

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// TestK3sWorkerTokenSecretWithTrailingNewline: a Secret created with
// `kubectl create secret generic tok --from-file=value=/var/lib/rancher/k3s/server/agent-token`
// holds the token plus a newline. Admission accepts the reference, but the worker never gets
// bootstrap data: DataSecretAvailable=False/InvalidConfiguration "k3s token contains whitespace".
func TestK3sWorkerTokenSecretWithTrailingNewline(t *testing.T) {
	tok, err := token.FormatK3sToken(strings.Repeat("ab", 32), token.K3sAgentUser, "from-file")
	if err != nil {
		t.Fatal(err)
	}
	cluster := newCluster()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	spec := bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: bootstrapv1.DistributionK3s,
		WorkerTokenSecretRef: &bootstrapv1.SecretKeyReference{Name: "tok"}}
	objs := append(pkiObjects(t), cluster, newMachine("m", "v1.31.2"), newConfig("m", spec),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, Data: map[string][]byte{"value": []byte(tok + "\n")}})
	r := NewOffline(newClient(t, objs...))
	_, config := reconcile(t, r, "m")
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &corev1.Secret{}); err != nil {
		t.Fatalf("no bootstrap data for a k3s worker whose token Secret ends with a newline: %+v", config.Status.Conditions)
	}
}
