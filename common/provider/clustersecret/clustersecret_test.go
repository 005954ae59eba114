package clustersecret_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	"github.com/kairos-capi/kairos-capi/common/token"
)

var (
	key   = client.ObjectKey{Namespace: "ns", Name: "demo"}
	owner = metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "demo", UID: "uid"}
)

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// TestPKILifecycle generates the cluster certificates once and checks every reader against them.
func TestPKILifecycle(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)

	_, err := clustersecret.LookupPKI(ctx, c, key)
	if !clustersecret.IsMissing(err) {
		t.Fatalf("LookupPKI on an empty namespace = %v, want ErrMissing", err)
	}
	for _, name := range []string{"demo-ca", "demo-etcd", "demo-proxy", "demo-sa"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if _, err := clustersecret.CACertificate(ctx, c, key); !clustersecret.IsMissing(err) || !strings.Contains(err.Error(), "demo-ca") {
		t.Errorf("CACertificate = %v, want ErrMissing naming demo-ca", err)
	}

	generated, err := clustersecret.LookupOrGeneratePKI(ctx, c, key, owner)
	if err != nil {
		t.Fatal(err)
	}
	for name, kp := range map[string]pki.KeyPair{"cluster CA": generated.ClusterCA, "etcd CA": generated.EtcdCA, "front-proxy CA": generated.FrontProxyCA} {
		if _, _, err := pki.ParseKeyPair(kp); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := pki.ParseServiceAccountKeyPair(generated.ServiceAccount); err != nil {
		t.Errorf("service account: %v", err)
	}

	for _, name := range []string{"demo-ca", "demo-etcd", "demo-proxy", "demo-sa"} {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, s); err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
		if s.Type != clusterv1.ClusterSecretType || s.Labels[clusterv1.ClusterNameLabel] != "demo" ||
			len(s.OwnerReferences) != 1 || s.OwnerReferences[0] != owner || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			t.Errorf("Secret %s = %+v", name, s)
		}
	}

	// Everything is read back, never generated twice.
	again, err := clustersecret.LookupOrGeneratePKI(ctx, c, key, owner)
	if err != nil || !reflect.DeepEqual(again, generated) {
		t.Fatalf("second LookupOrGeneratePKI generated new material (%v)", err)
	}
	read, err := clustersecret.LookupPKI(ctx, c, key)
	if err != nil || !reflect.DeepEqual(read, generated) {
		t.Fatalf("LookupPKI = %v", err)
	}
	ca, err := clustersecret.CACertificate(ctx, c, key)
	if err != nil || string(ca) != string(generated.ClusterCA.Cert) {
		t.Fatalf("CACertificate = %v", err)
	}

	// A partial set reports only what is missing.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo-proxy"}}); err != nil {
		t.Fatal(err)
	}
	_, err = clustersecret.LookupPKI(ctx, c, key)
	if !clustersecret.IsMissing(err) || !strings.Contains(err.Error(), "[demo-proxy]") {
		t.Fatalf("LookupPKI with demo-proxy deleted = %v", err)
	}

	// The k3s tokens are pinned to the cluster CA and created once.
	_, err = clustersecret.LookupK3sTokens(ctx, c, key)
	if !clustersecret.IsMissing(err) || !strings.Contains(err.Error(), "demo-k3s-token") {
		t.Fatalf("LookupK3sTokens = %v, want ErrMissing naming demo-k3s-token", err)
	}
	tok, err := clustersecret.LookupOrGenerateK3sToken(ctx, c, key, generated.ClusterCA.Cert, owner)
	if err != nil {
		t.Fatal(err)
	}
	hash, _, _, err := token.ParseK3sToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := token.K3sCAHash(generated.ClusterCA.Cert); hash != want {
		t.Errorf("token pins %s, want the cluster CA %s", hash, want)
	}
	if again, err := clustersecret.LookupOrGenerateK3sToken(ctx, c, key, generated.ClusterCA.Cert, owner); err != nil || again != tok {
		t.Errorf("second LookupOrGenerateK3sToken = %q, %v; want the stored token", again, err)
	}
	tokens, err := clustersecret.LookupK3sTokens(ctx, c, key)
	if err != nil || tokens.Server != tok {
		t.Fatalf("LookupK3sTokens = %+v, %v", tokens, err)
	}
	agentHash, user, _, err := token.ParseK3sToken(tokens.Agent)
	if err != nil || agentHash != hash || user != token.K3sAgentUser {
		t.Errorf("agent token %q (%v): want user %q pinned to the cluster CA", tokens.Agent, err, token.K3sAgentUser)
	}
}

// TestK3sAgentTokenAddedToOlderSecret: a token Secret written before agent tokens existed
// gets one, and keeps its server token.
func TestK3sAgentTokenAddedToOlderSecret(t *testing.T) {
	ctx := context.Background()
	kp, err := pki.NewCA("kubernetes-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := token.NewK3sToken(kp.Cert)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo-k3s-token"}, Data: map[string][]byte{"value": []byte(server)}})
	if _, err := clustersecret.LookupK3sTokens(ctx, c, key); !clustersecret.IsMissing(err) || !strings.Contains(err.Error(), "agent-token") {
		t.Fatalf("LookupK3sTokens = %v, want the agent token missing", err)
	}
	got, err := clustersecret.LookupOrGenerateK3sToken(ctx, c, key, kp.Cert, owner)
	if err != nil || got != server {
		t.Fatalf("LookupOrGenerateK3sToken = %q, %v", got, err)
	}
	tokens, err := clustersecret.LookupK3sTokens(ctx, c, key)
	if err != nil || tokens.Server != server || !strings.Contains(tokens.Agent, "::node:") {
		t.Fatalf("LookupK3sTokens = %+v, %v", tokens, err)
	}
}

func TestMalformedSecrets(t *testing.T) {
	ctx := context.Background()
	c := newClient(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo-ca"}, Data: map[string][]byte{"tls.crt": []byte("x")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo-k3s-token"}, Data: map[string][]byte{"other": []byte("x")}},
	)
	if _, err := clustersecret.CACertificate(ctx, c, key); err == nil || clustersecret.IsMissing(err) || !strings.Contains(err.Error(), "must hold both tls.crt and tls.key") {
		t.Errorf("CACertificate = %v", err)
	}
	if _, err := clustersecret.LookupK3sTokens(ctx, c, key); err == nil || clustersecret.IsMissing(err) || !strings.Contains(err.Error(), `has no "value" key`) {
		t.Errorf("LookupK3sTokens = %v", err)
	}
	if _, err := clustersecret.LookupOrGenerateK3sToken(ctx, c, key, nil, owner); err == nil || clustersecret.IsMissing(err) {
		t.Errorf("LookupOrGenerateK3sToken replaced a malformed token Secret: %v", err)
	}
}
