package simnode

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/test/objectstore"
)

// k3s' S3 client refuses what a real bucket connection refuses, and says why: a store whose
// certificate the configured CA did not sign, a store nobody listens for, keys the store does not
// accept. Nothing is deleted by a refused prune. (The scheduled path with a wrong secret runs
// against real etcd in TestEtcdSnapshots.)
func TestK3sS3Refusals(t *testing.T) {
	store := objectstore.Start(t, objectstore.Options{Buckets: []string{"b"}, Region: "eu-west-1"})
	other := objectstore.Start(t, objectstore.Options{Buckets: []string{"b"}})
	root := t.TempDir()
	ca := func(name string, pem []byte) string {
		p := filepath.Join(root, "etc", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, pem, 0o644); err != nil {
			t.Fatal(err)
		}
		return "/etc/" + name
	}
	right, wrong := ca("right.crt", store.CAPEM), ca("wrong.crt", other.CAPEM)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	const old = "f/etcd-snapshot-n-1"
	for _, key := range []string{old, "f/etcd-snapshot-n-2", "f/etcd-snapshot-n-3"} {
		if _, err := store.Backend.PutObject("b", key, nil, strings.NewReader("x"), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	base, err := parseK3sSnapshotConfig([]string{"etcd-s3: true\netcd-s3-bucket: b\netcd-s3-folder: f\netcd-s3-region: eu-west-1\n" +
		"etcd-s3-endpoint: " + store.Endpoint + "\netcd-s3-access-key: " + store.AccessKeyID + "\netcd-s3-secret-key: " + store.SecretAccessKey + "\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*k3sSnapshotConfig)
		want string
	}{
		{"another CA", func(c *k3sSnapshotConfig) { c.EndpointCA = wrong }, "certificate signed by unknown authority"},
		{"no listener", func(c *k3sSnapshotConfig) { c.EndpointCA, c.Endpoint = right, closed }, "connection refused"},
		{"wrong secret", func(c *k3sSnapshotConfig) { c.EndpointCA, c.SecretKey = right, "not-the-secret" }, "SignatureDoesNotMatch"},
		{"unknown key", func(c *k3sSnapshotConfig) { c.EndpointCA, c.AccessKey = right, "AKIAUNKNOWN" }, "InvalidAccessKeyId"},
	} {
		c := base
		tc.edit(&c)
		err := k3sPrune(context.Background(), root, "n", c, "etcd-snapshot", 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), store.SecretAccessKey) {
			t.Errorf("%s: the error shows the secret", tc.name)
		}
	}
	if keys, _ := store.Keys("b"); len(keys) != 3 {
		t.Errorf("a refused prune deleted: %q", keys)
	}
	c := base
	c.EndpointCA = right
	if err := k3sPrune(context.Background(), root, "n", c, "etcd-snapshot", 1); err != nil {
		t.Fatal(err)
	}
	if keys, _ := store.Keys("b"); strings.Join(keys, " ") != "f/etcd-snapshot-n-3" {
		t.Errorf("prune with retention 1 left %q", keys)
	}
}

// etcd's restore refuses what is not a snapshot, and a k0s archive without its snapshot is
// refused; nothing is left in the data directory. (Restores of real snapshots, and a k3s cluster
// reset from the bucket, run in TestEtcdSnapshots.)
func TestRestoreRefusesCorruptSnapshots(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "corrupt")
	if err := os.WriteFile(bad, []byte(strings.Repeat("not a snapshot ", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := RestoreEtcdSnapshot(bad, data, "m", "https://127.0.0.1:2380"); err == nil {
		t.Fatal("a corrupt snapshot was restored")
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s (%v)", data, err)
	}
	if _, err := K0sBackupEntries(strings.NewReader("not gzip"), filepath.Join(dir, "db")); err == nil || !strings.Contains(err.Error(), "not gzip") {
		t.Errorf("a k0s archive that is not gzip: %v", err)
	}
}

// k3s keeps its bootstrap data under /bootstrap/ and the first 12 hex digits of the SHA-256 of
// the token's passphrase (the password of a secure token); etcd data holding another token's
// key is refused, data without any is a new cluster's.
func TestK3sBootstrapKey(t *testing.T) {
	const secure = "K10" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "::server:abc"
	// sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
	if got := k3sBootstrapKey(secure); got != "/bootstrap/ba7816bf8f01" {
		t.Errorf("the key of a secure token is %s, want the hash of its password", got)
	}
	if got := k3sBootstrapKey("abc\n"); got != "/bootstrap/ba7816bf8f01" {
		t.Errorf("the key of a short token is %s", got)
	}
	mine := k3sBootstrapKey(secure)
	for _, tc := range []struct {
		keys []string
		err  error
	}{
		{nil, nil},
		{[]string{"/registry/configmaps/default/x"}, nil},
		{[]string{"/registry/configmaps/default/x", mine}, nil},
		{[]string{k3sBootstrapKey("another-token")}, errK3sBootstrapToken},
	} {
		if err := checkK3sBootstrapKeys(tc.keys, mine); err != tc.err {
			t.Errorf("keys %q: %v, want %v", tc.keys, err, tc.err)
		}
	}
}

// A restore needs the token: from the flags, the config files, or the token file of an earlier
// start; on a new host without any, k3s refuses with its own message.
func TestK3sRestoreToken(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/rancher/k3s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/rancher/k3s/token"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  k3sSnapshotConfig
		args []string
		want string
	}{
		{"flag", k3sSnapshotConfig{}, []string{"--token=from-flag"}, "from-flag"},
		{"token file flag", k3sSnapshotConfig{Token: "from-config"}, []string{"--token-file", filepath.Join(root, "etc/rancher/k3s/token")}, "from-config"},
		{"token file flag only", k3sSnapshotConfig{}, []string{"--token-file=" + filepath.Join(root, "etc/rancher/k3s/token")}, "from-file"},
		{"config", k3sSnapshotConfig{TokenFile: "/etc/rancher/k3s/token"}, nil, "from-file"},
	} {
		got, err := k3sRestoreToken(root, tc.cfg, tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := k3sRestoreToken(root, k3sSnapshotConfig{}, []string{"--cluster-init"}); err == nil ||
		err.Error() != "/var/lib/rancher/k3s/server/token does not exist, please pass --token to complete the restoration" {
		t.Errorf("without a token: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "data/server"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "data/server/token"), []byte("earlier-start"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := k3sRestoreToken(root, k3sSnapshotConfig{}, []string{"--data-dir=" + filepath.Join(root, "data")}); err != nil || got != "earlier-start" {
		t.Errorf("the token file of an earlier start: %q, %v", got, err)
	}
}
