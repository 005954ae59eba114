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
// the manager. What must hold while an entry lives is checked on caches whose entries live an
// hour, and the expiry on caches whose entries live 50 ms, checked only after twice that: a
// machine that stalls the test between two steps (a CPU quota throttles it for as long as it
// likes) changes neither outcome.

// shortTTL is the lifetime of entries in the expiry checks.
const shortTTL = 50 * time.Millisecond

func TestAppliedStatesExpire(t *testing.T) {
	a := &appliedStates{ttl: time.Hour}
	a.set("uid-a", "7", "state")
	if !a.has("uid-a", "7", "state") {
		t.Fatal("an applied state just recorded is not known")
	}
	for _, other := range [][3]string{{"uid-a", "8", "state"}, {"uid-a", "7", "other"}, {"uid-b", "7", "state"}} {
		if a.has(types.UID(other[0]), other[1], other[2]) {
			t.Errorf("applied state %v known, only uid-a/7/state was recorded", other)
		}
	}

	short := &appliedStates{ttl: shortTTL}
	short.set("uid-a", "7", "state")
	time.Sleep(2 * shortTTL)
	if short.has("uid-a", "7", "state") {
		t.Error("an applied state is still known after its lifetime")
	}
	// What the sweep of Cluster API's cache does (List) removes the expired entries for good.
	short.store().(interface{ List() []any }).List()
	if n := short.store().Len(); n != 0 {
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
	certs := newEtcdClientCerts(ctx, time.Hour)
	first, err := certs.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	again, err := certs.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.cert.Certificate[0], again.cert.Certificate[0]) {
		t.Error("a second reconciliation signed a new certificate instead of reusing the first")
	}
	other, err := certs.get("cluster-a", rotated)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.cert.Certificate[0], other.cert.Certificate[0]) {
		t.Error("the certificate of the old CA was reused after the CA changed")
	}

	short := newEtcdClientCerts(ctx, shortTTL)
	expiring, err := short.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * shortTTL)
	later, err := short.get("cluster-a", ca)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(expiring.cert.Certificate[0], later.cert.Certificate[0]) {
		t.Error("a certificate was reused past the cache's lifetime")
	}
	// The sweep removes the expired entry; the fresh one stays unless it expired too meanwhile.
	short.entries.(interface{ List() []any }).List()
	if n := short.entries.Len(); n > 1 {
		t.Errorf("%d entries after the sweep, want at most the fresh one", n)
	}
}
