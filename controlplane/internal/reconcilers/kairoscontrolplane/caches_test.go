package kairoscontrolplane

import (
	"bytes"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// The reconciler's caches forget: their entries expire (as Cluster API's server-side-apply
// cache's do), so the entries of deleted Machines and clusters do not pile up for the life of
// the manager.

func TestAppliedStatesExpire(t *testing.T) {
	a := &appliedStates{ttl: 100 * time.Millisecond}
	a.set("uid-a", "7", "state")
	if !a.has("uid-a", "7", "state") {
		t.Fatal("an applied state just recorded is not known")
	}
	for _, other := range [][3]string{{"uid-a", "8", "state"}, {"uid-a", "7", "other"}, {"uid-b", "7", "state"}} {
		if a.has(types.UID(other[0]), other[1], other[2]) {
			t.Errorf("applied state %v known, only uid-a/7/state was recorded", other)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if a.has("uid-a", "7", "state") {
		t.Error("an applied state is still known after its lifetime")
	}
	// What the sweep of Cluster API's cache does (List) removes the expired entries for good.
	a.store().(interface{ List() []any }).List()
	if n := a.store().Len(); n != 0 {
		t.Errorf("%d entries left after the sweep, want 0", n)
	}
}

func TestEtcdClientCertsExpire(t *testing.T) {
	ctx := testContext(t)
	ca, err := pki.NewCA("etcd-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := pki.NewCA("etcd-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs := newEtcdClientCerts(ctx, 300*time.Millisecond)
	first, err := certs.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	again, err := certs.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Certificate[0], again.Certificate[0]) {
		t.Error("a second reconciliation signed a new certificate instead of reusing the first")
	}
	other, err := certs.get("cluster-a", rotated)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.Certificate[0], other.Certificate[0]) {
		t.Error("the certificate of the old CA was reused after the CA changed")
	}
	time.Sleep(400 * time.Millisecond)
	later, err := certs.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.Certificate[0], later.Certificate[0]) {
		t.Error("a certificate was reused past the cache's lifetime")
	}
	certs.entries.(interface{ List() []any }).List()
	if n := certs.entries.Len(); n != 1 {
		t.Errorf("%d entries after the sweep, want only the fresh one", n)
	}
}
