package objectstore

import (
	"context"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
)

// The control plane's listing (controlplane/etcdsnapshots) against the store: its requests pass
// the Signature V4 verifier, the newest snapshot of each node comes back whatever its kind, and
// wrong keys are refused without the secret in the error.
func TestControlPlaneListsTheStore(t *testing.T) {
	s := Start(t, Options{Buckets: []string{"site-backups"}, Region: "eu-west-1"})
	for _, key := range []string{
		"edge/default/site-a/site-a-site-a-cp-x7k2p-1764403200.tar.gz",
		"edge/default/site-a/pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz",
		"edge/default/site-a/site-a-site-a-cp-b9m4q-1764403100",
		"edge/default/site-a/.metadata/site-a-site-a-cp-b9m4q-1764403900",
		"edge/default/site-b/site-b-site-b-cp-aaaaa-1764409999",
	} {
		put(t, s, key, []byte("snapshot "+key))
	}
	store := etcdsnapshots.Store{
		Endpoint: s.Endpoint, Bucket: "site-backups", Folder: "edge/default/site-a", Region: s.Region,
		CABundle: s.CAPEM, AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey,
	}
	objs, err := store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	newest := etcdsnapshots.Newest("site-a", store.Folder, objs)
	if got := strings.Join(etcdsnapshots.Nodes(newest), ","); got != "site-a-cp-b9m4q,site-a-cp-x7k2p" {
		t.Fatalf("nodes %s", got)
	}
	x := newest["site-a-cp-x7k2p"]
	if x.Name != "pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz" || x.Kind != etcdsnapshots.KindPreUpgrade || x.Size != int64(len("snapshot "+x.Key)) {
		t.Errorf("newest of x7k2p: %+v", x)
	}
	if s.Refused() != 0 {
		t.Errorf("the store refused %d requests", s.Refused())
	}

	store.SecretAccessKey = "not-the-secret"
	if _, err := store.List(context.Background()); err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "not-the-secret") {
		t.Errorf("listing with a wrong secret: %v", err)
	}
}
