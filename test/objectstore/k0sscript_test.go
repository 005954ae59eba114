package objectstore

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// k0sNode renders a k0s control-plane document whose snapshots go to the store, and returns the
// files it writes, by path.
func k0sNode(t *testing.T, s *Store, accessKeyID, secretAccessKey string, retention int32) map[string]cloudconfig.File {
	t.Helper()
	ca, err := pki.NewCA("kubernetes", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	data, err := render.Document(render.Node{
		Distribution: render.K0s, Role: render.RoleControlPlane, Init: true, SingleNode: true,
		KubernetesVersion: "v1.34.1", ClusterName: "site-a", Hostname: "site-a-cp-x7k2p",
		Endpoint: render.Endpoint{Host: "192.0.2.10", Port: 6443},
		Users:    []render.User{{Name: "kairos", Groups: []string{"admin"}}},
		PKI:      &render.PKI{ClusterCA: *ca, EtcdCA: *ca, FrontProxyCA: *ca, ServiceAccount: *sa},
		EtcdSnapshots: &render.EtcdSnapshots{
			Schedule: "0 */6 * * *", Retention: retention,
			Endpoint: s.Endpoint, Bucket: "site-backups", Folder: "edge/default/site-a", Region: s.Region,
			CABundle:    string(s.CAPEM),
			AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return documentFiles(t, data)
}

// documentFiles returns the files a rendered document writes, by path.
func documentFiles(t *testing.T, data []byte) map[string]cloudconfig.File {
	t.Helper()
	doc, err := cloudconfig.Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]cloudconfig.File{}
	for _, steps := range doc.Stages {
		for _, st := range steps {
			for _, f := range st.Files {
				files[f.Path] = f
			}
		}
	}
	return files
}

// node is a directory standing in for a k0s controller's file system: the rendered script, curl
// configuration and CA at their paths under root, the script's absolute paths and PATH pointed
// there (the only changes made to the rendered script), and fakes of what a real node runs
// besides curl: k0s backup (an archive naming the clock's next value), hostname, and date (a
// clock that advances one second per call, so that names differ without waiting).
type node struct {
	root, script string
}

func newNode(t *testing.T, files map[string]cloudconfig.File) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{root: root, script: filepath.Join(root, render.EtcdSnapshotScript)}
	bin := filepath.Join(root, "bin")
	for _, path := range []string{render.EtcdSnapshotScript, render.EtcdSnapshotCurlConfig, render.EtcdSnapshotCA} {
		if _, ok := files[path]; !ok {
			t.Fatalf("the document writes no %s", path)
		}
	}
	writeBelow(t, root, files, []string{render.EtcdSnapshotScript, render.EtcdSnapshotConfigDir})
	write(t, filepath.Join(bin, "hostname"), "#!/bin/sh\necho site-a-cp-x7k2p\n", 0o755)
	write(t, filepath.Join(bin, "date"), "#!/bin/sh\nf="+root+"/clock\nn=$(cat $f 2>/dev/null || echo 1764403200)\necho $((n+1)) > $f\necho $n\n", 0o755)
	// k0s backup --save-path=<dir> writes k0s_backup_<timestamp>.tar.gz there.
	write(t, filepath.Join(bin, "k0s"), "#!/bin/sh\n[ \"$1\" = backup ] || exit 2\ndir=${2#--save-path=}\n"+
		"printf 'k0s backup archive %s\\n' \"$(cat "+root+"/clock)\" > \"$dir/k0s_backup_2025-11-29T08_00_00Z.tar.gz\"\n", 0o755)
	return n
}

// writeBelow writes the files of the document at or under the given paths below root, with
// what a script names pointed there: the snapshot folders, the distribution's data directories
// and PATH (root/bin first, where the tests put their fakes). Nothing else of the rendered
// content is changed.
func writeBelow(t *testing.T, root string, files map[string]cloudconfig.File, paths []string) {
	t.Helper()
	rewrite := strings.NewReplacer(
		render.EtcdSnapshotConfigDir, filepath.Join(root, render.EtcdSnapshotConfigDir),
		render.EtcdSnapshotDir, filepath.Join(root, render.EtcdSnapshotDir),
		"/var/lib/k0s", filepath.Join(root, "var/lib/k0s"),
		"/var/lib/rancher/k3s", filepath.Join(root, "var/lib/rancher/k3s"),
		"PATH=/usr/local/sbin:", "PATH="+filepath.Join(root, "bin")+":/usr/local/sbin:",
	)
	for path, f := range files {
		for _, p := range paths {
			if path == p || strings.HasPrefix(path, p+"/") {
				write(t, filepath.Join(root, path), rewrite.Replace(f.Content), os.FileMode(f.Permissions))
				break
			}
		}
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func (n *node) save(t *testing.T, kind string) (string, error) {
	t.Helper()
	out, err := exec.Command("/bin/sh", n.script, "save", kind).CombinedOutput()
	return string(out), err
}

// The rendered k0s snapshot script, run with the real curl (--aws-sigv4, --config with the
// rendered credentials and CA) against the store: every upload, listing and deletion passes
// the Signature V4 verifier; retention keeps the newest snapshots of each kind, here and in the
// bucket; the objects hold what k0s backup wrote, under <folder>/<name>-<node>-<unix time>.tar.gz.
func TestRenderedK0sScriptUploadsWithCurl(t *testing.T) {
	requireCurl(t)
	s := Start(t, Options{Buckets: []string{"site-backups"}, Region: "eu-west-1"})
	n := newNode(t, k0sNode(t, s, s.AccessKeyID, s.SecretAccessKey, 2))

	for range 3 {
		if out, err := n.save(t, "scheduled"); err != nil {
			t.Fatalf("save scheduled: %v\n%s", err, out)
		}
	}
	if out, err := n.save(t, "pre-upgrade"); err != nil {
		t.Fatalf("save pre-upgrade: %v\n%s", err, out)
	}
	keys, err := s.Keys("site-backups")
	if err != nil {
		t.Fatal(err)
	}
	// The clock gives each run's name the next second: 1764403200 was the first scheduled
	// snapshot, pruned by the retention of 2; the pre-upgrade one counts on its own.
	want := []string{
		"edge/default/site-a/pre-upgrade-site-a-site-a-cp-x7k2p-1764403203.tar.gz",
		"edge/default/site-a/site-a-site-a-cp-x7k2p-1764403201.tar.gz",
		"edge/default/site-a/site-a-site-a-cp-x7k2p-1764403202.tar.gz",
	}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("bucket holds %q, want %q", keys, want)
	}
	data, err := s.Object("site-backups", want[2])
	if err != nil || string(data) != "k0s backup archive "+strconv.Itoa(1764403202)+"\n" {
		t.Errorf("object %s holds %q (%v)", want[2], data, err)
	}
	local, err := os.ReadDir(filepath.Join(n.root, render.EtcdSnapshotDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range local {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "pre-upgrade-site-a-site-a-cp-x7k2p-1764403203.tar.gz site-a-site-a-cp-x7k2p-1764403201.tar.gz site-a-site-a-cp-x7k2p-1764403202.tar.gz" {
		t.Errorf("the node keeps %q", names)
	}
	if s.Refused() != 0 {
		t.Errorf("the store refused %d of curl's requests", s.Refused())
	}
}

// With keys the store does not accept, the script fails, says which step failed, and stores
// nothing; the secret is in no output.
func TestRenderedK0sScriptRefusedWithWrongKeys(t *testing.T) {
	requireCurl(t)
	s := Start(t, Options{Buckets: []string{"site-backups"}})
	const wrong = "not-the-store-secret"
	n := newNode(t, k0sNode(t, s, s.AccessKeyID, wrong, 2))
	out, err := n.save(t, "scheduled")
	if err == nil || !strings.Contains(out, "kairos-capi: scheduled etcd snapshot: uploading site-a-site-a-cp-x7k2p-1764403200.tar.gz to s3://site-backups/edge/default/site-a/ failed") {
		t.Fatalf("got %v:\n%s", err, out)
	}
	if strings.Contains(out, wrong) {
		t.Errorf("the output shows the secret:\n%s", out)
	}
	if keys, _ := s.Keys("site-backups"); len(keys) != 0 || s.Refused() == 0 {
		t.Errorf("stored %q, refused %d", keys, s.Refused())
	}
}

// requireCurl fails the test without curl: the rendered k0s script uploads with it, as a Kairos
// node does (kairos-init installs it), and a skipped test would prove nothing about the script.
func requireCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is not installed: these tests run the rendered k0s snapshot script, which uploads with curl (install it, for example apt-get install curl)")
	}
}
