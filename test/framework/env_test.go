package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// The controller manager the harnesses run collects garbage: an object whose owner is deleted
// goes too, and so does the content of a deleted namespace.
func TestControllerManagerCollectsGarbage(t *testing.T) {
	env := framework.StartCore(t)
	kcm, err := env.StartControllerManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kcm.Stop(10 * time.Second) })

	ctx := context.Background()
	c := env.Client
	ns := framework.NewNamespace(t, c, "gc-")
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
	}}}}
	if err := c.Create(ctx, owned); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	gone := func(o client.Object) func() error {
		return func() error {
			err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return errStillThere
		}
	}
	framework.Eventually(t, time.Minute, gone(owned))

	lone := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lone"}}
	if err := c.Create(ctx, lone); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	if exited, err := kcm.Exited(); exited {
		t.Fatalf("kube-controller-manager exited: %v\n%s", err, kcm.Output())
	}
}

var errStillThere = errors.New("still there")

// The controller manager also runs single controllers against any API server: its token
// cleaner deletes a bootstrap token Secret once the token's expiration has passed (the
// lifecycle tests run it against simulated workload clusters), and leaves a valid one alone.
func TestControllerManagerCleansExpiredTokens(t *testing.T) {
	env := framework.StartCore(t)
	kubeconfig, err := framework.Kubeconfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := framework.StartControllerManager(t.TempDir(), kubeconfig, "token-cleaner-controller")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kcm.Stop(10 * time.Second) })

	ctx := context.Background()
	c := env.Client
	token := func(id string, expires time.Time) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{
				"token-id": id, "token-secret": "0123456789abcdef",
				"expiration":                     expires.UTC().Format(time.RFC3339),
				"usage-bootstrap-authentication": "true",
			},
		}
	}
	expiring := token("abcdef", time.Now().Add(3*time.Second))
	valid := token("ghijkl", time.Now().Add(time.Hour))
	for _, s := range []*corev1.Secret{expiring, valid} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, time.Minute, func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(expiring), &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errStillThere
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(valid), &corev1.Secret{}); err != nil {
		t.Errorf("the token cleaner removed a valid token: %v", err)
	}
	if exited, err := kcm.Exited(); exited {
		t.Fatalf("kube-controller-manager exited: %v\n%s", err, kcm.Output())
	}
}
