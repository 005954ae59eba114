package objectstore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// restoreNode renders the document of a k0s controller that restores the cluster site-a (CA
// ca) from the store, and returns its files by path.
func restoreNode(t *testing.T, s *Store, ca *pki.KeyPair) map[string]cloudconfig.File {
	t.Helper()
	return restoreNodeOf(t, render.K0s, s, ca)
}

// restoreNodeOf renders the document of a control-plane node of distribution d that restores
// the cluster site-a (CA ca) from the store, and returns its files by path.
func restoreNodeOf(t *testing.T, d render.Distribution, s *Store, ca *pki.KeyPair) map[string]cloudconfig.File {
	t.Helper()
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	n := render.Node{
		Distribution: d, Role: render.RoleControlPlane, Init: true, SingleNode: true,
		KubernetesVersion: "v1.34.1", ClusterName: "site-a", Hostname: "site-a-cp-b9m4q",
		Endpoint: render.Endpoint{Host: "192.0.2.10", Port: 6443},
		Users:    []render.User{{Name: "kairos", Groups: []string{"admin"}}},
		PKI:      &render.PKI{ClusterCA: *ca, EtcdCA: *ca, FrontProxyCA: *ca, ServiceAccount: *sa},
		EtcdSnapshots: &render.EtcdSnapshots{
			Schedule: "0 */6 * * *", Retention: 5,
			Endpoint: s.Endpoint, Bucket: "site-backups", Folder: "edge/default/site-a", Region: s.Region,
			CABundle: string(s.CAPEM), AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey,
			Restore: true,
		},
	}
	if d == render.K3s {
		var err error
		if n.JoinToken, err = token.NewK3sToken(ca.Cert); err != nil {
			t.Fatal(err)
		}
		if n.AgentToken, err = token.NewK3sAgentToken(ca.Cert); err != nil {
			t.Fatal(err)
		}
	}
	data, err := render.Document(n)
	if err != nil {
		t.Fatal(err)
	}
	return documentFiles(t, data)
}

// restoringNode is a directory standing in for the controller's file system before k0s first
// starts: the rendered restore script, curl configuration, CA and the PKI the document writes,
// at their paths under root (the script's absolute paths and PATH pointed there, the only
// changes made to it), and a fake `k0s restore` that unpacks the archive into the data
// directory with tar, failing as k0s does on an archive that is not a gzipped tar or on a data
// directory that overlaps it.
type restoringNode struct {
	root, script string
}

func newRestoringNode(t *testing.T, files map[string]cloudconfig.File) *restoringNode {
	t.Helper()
	root := t.TempDir()
	n := &restoringNode{root: root, script: filepath.Join(root, render.EtcdRestoreScript)}
	bin := filepath.Join(root, "bin")
	writeBelow(t, root, files, []string{render.EtcdRestoreScript, render.EtcdSnapshotConfigDir, render.K0sPKIDir})
	data := filepath.Join(root, "var/lib/k0s")
	write(t, filepath.Join(bin, "k0s"), "#!/bin/sh\n[ \"$1\" = restore ] || exit 2\n"+
		"case \"$2\" in --config-out=*) ;; *) exit 2 ;; esac\n"+
		"[ ! -e "+data+"/pki ] || { echo 'the data directory overlaps the archive' >&2; exit 1; }\n"+
		"mkdir -p "+data+" && tar -xzf \"$3\" -C "+data+"\n", 0o755)
	return n
}

// restore runs the script; one that still runs after two minutes has hung (its curl waits on
// a store that never answers) and is killed.
func (n *restoringNode) restore(t *testing.T) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", n.script)
	// The whole process group goes: a hung curl below the shell would hold the output open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the restore script still ran after two minutes:\n%s", out)
	}
	return string(out), err
}

// archive is a gzipped tar holding pki/ca.crt and etcd/member/snap/db, as k0s backup's
// archive holds the data directory's PKI and the etcd snapshot.
func archive(t *testing.T, caCert []byte, db string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range map[string][]byte{"pki/ca.crt": caCert, "etcd/member/snap/db": []byte(db)} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func put(t *testing.T, s *Store, key string, data []byte) {
	t.Helper()
	if _, err := s.Backend.PutObject("site-backups", key, nil, bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
}

// The rendered k0s restore script, run with the real curl against the store: it restores the
// newest snapshot of the cluster that restores, by the unix time that ends each name whatever
// its kind, skipping a corrupt archive and an archive of another cluster (its CA), ignoring
// other clusters' names in the folder; records what it restored and does nothing on the next
// start.
func TestRenderedK0sRestoreScript(t *testing.T) {
	requireCurl(t)
	s := Start(t, Options{Buckets: []string{"site-backups"}})
	ca, err := pki.NewCA("kubernetes", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("kubernetes", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const dir = "edge/default/site-a/"
	put(t, s, dir+"site-a-site-a-cp-x7k2p-1764403200.tar.gz", archive(t, ca.Cert, "older scheduled"))
	put(t, s, dir+"pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz", archive(t, ca.Cert, "newest good"))
	put(t, s, dir+"site-a-site-a-cp-x7k2p-1764403400.tar.gz", archive(t, other.Cert, "another cluster's"))
	put(t, s, dir+"site-a-site-a-cp-x7k2p-1764403500.tar.gz", []byte("not a gzipped tar"))
	put(t, s, dir+"site-b-site-b-cp-aaaaa-1764403600.tar.gz", archive(t, ca.Cert, "another cluster in the folder"))

	n := newRestoringNode(t, restoreNode(t, s, ca))
	out, err := n.restore(t)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	for _, want := range []string{
		"k0s could not restore site-a-site-a-cp-x7k2p-1764403500.tar.gz; trying an older snapshot",
		"site-a-site-a-cp-x7k2p-1764403400.tar.gz is a snapshot of another cluster",
		"restored pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz from s3://site-backups/edge/default/site-a/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, s.SecretAccessKey) {
		t.Errorf("the output shows the secret:\n%s", out)
	}
	db, err := os.ReadFile(filepath.Join(n.root, "var/lib/k0s/etcd/member/snap/db"))
	if err != nil || string(db) != "newest good" {
		t.Errorf("etcd data %q (%v), want the newest good snapshot's", db, err)
	}
	caNow, err := os.ReadFile(filepath.Join(n.root, render.K0sPKIDir, "ca.crt"))
	if err != nil || !bytes.Equal(caNow, ca.Cert) {
		t.Errorf("the PKI after the restore does not hold the cluster CA (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(n.root, render.K0sPKIDir+".kairos-capi")); !os.IsNotExist(err) {
		t.Errorf("the PKI set aside during the restore is still there (%v)", err)
	}
	marker, err := os.ReadFile(filepath.Join(n.root, render.EtcdRestoreMarker))
	if err != nil || !strings.HasPrefix(string(marker), "snapshot=pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz\nrestored=") {
		t.Errorf("marker %q (%v)", marker, err)
	}
	// Every later start (the unit's restarts, reboots) keeps the restored data.
	if err := os.WriteFile(filepath.Join(n.root, "var/lib/k0s/etcd/member/snap/db"), []byte("written after the restore"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := n.restore(t); err != nil || out != "" {
		t.Errorf("second start: %v %q", err, out)
	}
	if db, _ := os.ReadFile(filepath.Join(n.root, "var/lib/k0s/etcd/member/snap/db")); string(db) != "written after the restore" {
		t.Errorf("the second start restored again: %q", db)
	}
	if s.Refused() != 0 {
		t.Errorf("the store refused %d of curl's requests", s.Refused())
	}
}

// Without a snapshot that restores, or without the store, the script fails with the reason and
// leaves the PKI the document wrote in place, so that the unit's next start tries again.
func TestRenderedK0sRestoreScriptFails(t *testing.T) {
	requireCurl(t)
	ca, err := pki.NewCA("kubernetes", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		objects map[string][]byte
		stop    bool
		silent  bool
		want    string
	}{
		"empty folder": {want: "kairos-capi: etcd restore: s3://site-backups/edge/default/site-a/ holds no snapshot of cluster site-a"},
		"only corrupt": {
			objects: map[string][]byte{"site-a-site-a-cp-x7k2p-1764403200.tar.gz": []byte("corrupt")},
			want:    "kairos-capi: etcd restore: no snapshot of cluster site-a in s3://site-backups/edge/default/site-a/ restored; k0scontroller does not start",
		},
		"store down": {stop: true, want: "kairos-capi: etcd restore: listing s3://site-backups/edge/default/site-a/ failed; k0scontroller waits for the store"},
		// A store (or what stands in front of it) that accepts connections and never answers:
		// curl gives up after its connect timeout instead of holding the unit's start forever.
		"store silent": {stop: true, silent: true, want: "kairos-capi: etcd restore: listing s3://site-backups/edge/default/site-a/ failed; k0scontroller waits for the store"},
	} {
		t.Run(name, func(t *testing.T) {
			s := Start(t, Options{Buckets: []string{"site-backups"}})
			for key, data := range tc.objects {
				put(t, s, "edge/default/site-a/"+key, data)
			}
			n := newRestoringNode(t, restoreNode(t, s, ca))
			if tc.stop {
				s.server.Close()
			}
			if tc.silent {
				l, err := net.Listen("tcp", s.Endpoint)
				if err != nil {
					t.Fatal(err)
				}
				held := make(chan net.Conn, 16)
				t.Cleanup(func() {
					_ = l.Close()
					for len(held) > 0 {
						_ = (<-held).Close()
					}
				})
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						select {
						case held <- c: // held open, never answered
						default:
							_ = c.Close()
						}
					}
				}()
			}
			out, err := n.restore(t)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("got %v, want the output to say %q:\n%s", err, tc.want, out)
			}
			if _, err := os.Stat(filepath.Join(n.root, render.EtcdRestoreMarker)); !os.IsNotExist(err) {
				t.Errorf("a failed restore left the marker (%v)", err)
			}
			caNow, err := os.ReadFile(filepath.Join(n.root, render.K0sPKIDir, "ca.crt"))
			if err != nil || !bytes.Equal(caNow, ca.Cert) {
				t.Errorf("the document's PKI is not back in place (%v)", err)
			}
		})
	}
}

// The rendered k3s restore script, run with the real curl against the store and a fake k3s
// that records its arguments and fails to restore one snapshot (as k3s does with a corrupt one,
// or one whose bootstrap data the token does not decrypt): the script asks k3s to restore the
// newest snapshot of the cluster by name, with the node's own arguments (the token file that
// decrypts the bootstrap data), falls back to the next newest, ignores k3s' .metadata objects
// and other clusters' snapshots, and records what it restored.
func TestRenderedK3sRestoreScript(t *testing.T) {
	requireCurl(t)
	s := Start(t, Options{Buckets: []string{"site-backups"}})
	ca, err := pki.NewCA("kubernetes", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const dir = "edge/default/site-a/"
	for _, key := range []string{
		"site-a-site-a-cp-x7k2p-1764403200",
		"pre-upgrade-site-a-site-a-cp-x7k2p-1764403300",
		"site-a-site-a-cp-x7k2p-1764403500",
		".metadata/site-a-site-a-cp-x7k2p-1764403500",
		"site-b-site-b-cp-aaaaa-1764403600",
	} {
		put(t, s, dir+key, []byte("k3s snapshot "+key))
	}
	files := restoreNodeOf(t, render.K3s, s, ca)
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	writeBelow(t, root, files, []string{render.EtcdRestoreScript, render.EtcdSnapshotConfigDir})
	db := filepath.Join(root, "var/lib/rancher/k3s/server/db")
	write(t, filepath.Join(bin, "k3s"), "#!/bin/sh\necho \"$*\" >>"+root+"/k3s.log\n"+
		"[ \"$1 $2\" = 'server --cluster-reset' ] || exit 2\n"+
		"case \"$3\" in *-1764403500) echo 'etcd snapshot corrupt' >&2; mkdir -p "+db+"; exit 1 ;; esac\n"+
		"mkdir -p "+db+" && echo \"$3\" >"+db+"/restored-from\n", 0o755)

	out, err := exec.Command("/bin/sh", filepath.Join(root, render.EtcdRestoreScript)).CombinedOutput()
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "k3s could not restore site-a-site-a-cp-x7k2p-1764403500; trying an older snapshot") ||
		!strings.Contains(string(out), "restored pre-upgrade-site-a-site-a-cp-x7k2p-1764403300 from s3://site-backups/edge/default/site-a/") {
		t.Errorf("output:\n%s", out)
	}
	log, err := os.ReadFile(filepath.Join(root, "k3s.log"))
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(calls) != 2 || !strings.HasPrefix(calls[0], "server --cluster-reset --cluster-reset-restore-path=site-a-site-a-cp-x7k2p-1764403500 --cluster-init --token-file=/etc/rancher/k3s/token ") ||
		!strings.HasPrefix(calls[1], "server --cluster-reset --cluster-reset-restore-path=pre-upgrade-site-a-site-a-cp-x7k2p-1764403300 ") {
		t.Errorf("k3s ran as:\n%s", log)
	}
	if got, err := os.ReadFile(filepath.Join(db, "restored-from")); err != nil || string(got) != "--cluster-reset-restore-path=pre-upgrade-site-a-site-a-cp-x7k2p-1764403300\n" {
		t.Errorf("the data directory holds %q (%v): the failed attempt's leftovers were not removed, or the wrong snapshot restored", got, err)
	}
	if marker, err := os.ReadFile(filepath.Join(root, render.EtcdRestoreMarker)); err != nil || !strings.HasPrefix(string(marker), "snapshot=pre-upgrade-site-a-site-a-cp-x7k2p-1764403300\n") {
		t.Errorf("marker %q (%v)", marker, err)
	}
	if strings.Contains(string(out), s.SecretAccessKey) || s.Refused() != 0 {
		t.Errorf("the output shows the secret, or the store refused %d requests:\n%s", s.Refused(), out)
	}
}
