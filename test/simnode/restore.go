package simnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// RestoreEtcdSnapshot restores an etcd snapshot file (a k3s snapshot, or the etcd-snapshot.db of
// a k0s backup archive) into dataDir with etcd's own restore (etcdutl snapshot restore, which
// checks the snapshot's hash and writes a new single-member cluster), as k3s' cluster reset and
// k0s restore call it (k0s pkg/backup etcd_unix.go Restore: the node's name and its peer URL
// https://<address>:2380 as the only member). A member started on dataDir has the snapshot's
// data and nothing written after it.
func RestoreEtcdSnapshot(snapshotPath, dataDir, name, peerURL string) error {
	if _, err := os.Stat(filepath.Join(dataDir, "member")); err == nil {
		// etcdutl refuses it as well; said here with the reason k0s gives.
		return fmt.Errorf("restoring %s: the data directory %s already holds an etcd member", filepath.Base(snapshotPath), dataDir)
	}
	_, statErr := os.Stat(dataDir)
	created := os.IsNotExist(statErr)
	err := etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                name,
		OutputDataDir:       dataDir,
		PeerURLs:            []string{peerURL},
		InitialCluster:      name + "=" + peerURL,
		InitialClusterToken: "etcd-cluster",
	})
	if err != nil {
		if created {
			_ = os.RemoveAll(dataDir) // no half-restored member for etcd to start on
		}
		return fmt.Errorf("restoring %s: %w", filepath.Base(snapshotPath), err)
	}
	return nil
}

// EtcdKeys lists the keys an etcd data directory holds at its latest revision (deleted keys
// left out), read from its backend (member/snap/db) without starting etcd. The directory must not
// be in use by a running member.
func EtcdKeys(dataDir string) ([]string, error) {
	db, err := bolt.Open(filepath.Join(dataDir, "member", "snap", "db"), 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening the etcd backend: %w", err)
	}
	defer db.Close()
	live := map[string]bool{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("the backend has no key bucket")
		}
		// Revisions sort in the order they were written; a tombstone revision (a deletion) ends
		// with 't' after its 17 bytes.
		return b.ForEach(func(rev, v []byte) error {
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("decoding revision %x: %w", rev, err)
			}
			live[string(kv.Key)] = !(len(rev) == 18 && rev[17] == 't')
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for k, ok := range live {
		if ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

// K0sBackupEntries reads a k0s backup archive (k0s_backup_*.tar.gz, as `k0s backup` writes it):
// its entry names, and the etcd snapshot (etcd-snapshot.db) written to snapshotPath.
func K0sBackupEntries(archive io.Reader, snapshotPath string) ([]string, error) {
	gz, err := gzip.NewReader(archive)
	if err != nil {
		return nil, fmt.Errorf("the k0s backup archive is not gzip: %w", err)
	}
	tr := tar.NewReader(gz)
	var names []string
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return names, fmt.Errorf("reading the k0s backup archive: %w", err)
		}
		names = append(names, h.Name)
		if h.Name == "etcd-snapshot.db" {
			f, err := os.OpenFile(snapshotPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return names, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return names, err
			}
			found = true
		}
	}
	if !found {
		return names, errors.New("the k0s backup archive holds no etcd-snapshot.db")
	}
	return names, nil
}

// k3sResetFlag is what k3s leaves in its db directory after a cluster reset, so that the reset
// happens once (k3s pkg/etcd ResetFile, "reset-flag").
const k3sResetFlag = "/var/lib/rancher/k3s/server/db/reset-flag"

// k3sResetFromSnapshot does what `k3s server --cluster-reset --cluster-reset-restore-path=<name>`
// does on the init server before its etcd starts (k3s pkg/etcd: Reset and the S3 download of the
// restore path), below the node's root, for the member of name and peerURL whose data directory
// is data: with etcd-s3 it downloads <etcd-s3-folder>/<name> from the bucket ("give only the
// filename name of the snapshot as the restore path", docs.k3s.io/cli/etcd-snapshot), otherwise
// it reads <name> from the snapshot directory (or the absolute path), moves an existing member
// data directory aside, restores the snapshot with etcd's restore as a one-member cluster, and
// leaves k3sResetFlag. Like k3s, it fails on a snapshot whose bootstrap data was saved with
// another token (a snapshot of another cluster: checkK3sBootstrapKeys), and then removes what it
// restored. The node's own k3s command runs it (the rendered restore script calls it before k3s
// first starts); a snapshot etcd's restore refuses fails it, and the script tries the next one.
func k3sResetFromSnapshot(ctx context.Context, root string, cfg k3sSnapshotConfig, name, token, data, member, peerURL string) error {
	path := name
	if !filepath.IsAbs(name) {
		path = filepath.Join(k3sSnapshotDir, name)
	}
	local := filepath.Join(root, path)
	if cfg.S3 && !filepath.IsAbs(name) {
		if err := k3sDownload(ctx, root, cfg, name, local); err != nil {
			return fmt.Errorf("cluster reset from s3://%s/%s: %w", cfg.Bucket, cfg.s3Key(name), err)
		}
	}
	if _, err := os.Stat(local); err != nil {
		return fmt.Errorf("cluster reset: the snapshot %s: %w", name, err)
	}
	if _, err := os.Stat(data); err == nil {
		// k3s keeps the old data directory as etcd-old-<unix time>.
		if err := os.Rename(data, fmt.Sprintf("%s-old-%d", data, time.Now().Unix())); err != nil {
			return fmt.Errorf("cluster reset: moving the old etcd data aside: %w", err)
		}
	}
	if err := RestoreEtcdSnapshot(local, data, member, peerURL); err != nil {
		return fmt.Errorf("cluster reset: %w", err)
	}
	// k3s reads its bootstrap data from the restored etcd before it reports the reset done.
	keys, err := EtcdKeys(data)
	if err == nil {
		err = checkK3sBootstrapKeys(keys, k3sBootstrapKey(token))
	}
	if err != nil {
		_ = os.RemoveAll(data)
		return fmt.Errorf("cluster reset from %s: %w", name, err)
	}
	reset := filepath.Join(root, k3sResetFlag)
	if err := os.MkdirAll(filepath.Dir(reset), 0o700); err != nil {
		return err
	}
	return os.WriteFile(reset, nil, 0o600)
}

// k3sDownload fetches <folder>/<name> from k3s' bucket into path.
func k3sDownload(ctx context.Context, root string, c k3sSnapshotConfig, name, path string) error {
	cli, err := c.s3Client(root)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := cli.GetObject(dctx, &s3.GetObjectInput{Bucket: aws.String(c.Bucket), Key: aws.String(c.s3Key(name))})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, out.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// K0sRestore does what `k0s restore <archive>` does on a controller before it first starts
// (k0s pkg/backup manager_unix.go RunRestore and its steps): it unpacks the archive, refuses data
// that is already there (k0s: "The command would fail if the data directory for the current
// controller has overlapping data with the backup archive content"; here: an etcd member in
// dataDir, or a PKI file below root's /var/lib/k0s/pki with other content), restores
// etcd-snapshot.db into dataDir with etcd's restore as a one-member cluster of name (k0s uses
// the hostname) and peerURL (https://<storage.etcd.peerAddress>:2380), and writes the archive's
// pki/ files to /var/lib/k0s/pki below root. The archived k0s.yaml is not applied (k0s writes it
// to --config-out only when asked). The simulated node's `k0s restore` runs it
// (snapshothelper.go).
func K0sRestore(archive, root, dataDir, name, peerURL string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := os.Stat(filepath.Join(dataDir, "member")); err == nil {
		return fmt.Errorf("failed to restore on step `etcd`: %s already holds an etcd member", dataDir)
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("failed to unpack backup archive `%s`: %w", filepath.Base(archive), err)
	}
	tmp, err := os.MkdirTemp("", "k0s-restore")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tr := tar.NewReader(gz)
	pki := map[string]string{} // pki/<rel> -> unpacked file
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("failed to unpack backup archive `%s`: %w", filepath.Base(archive), err)
		}
		clean := filepath.Clean("/" + h.Name)[1:]
		if h.Typeflag != tar.TypeReg || clean == "" {
			continue
		}
		dst := filepath.Join(tmp, clean)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if rel, ok := strings.CutPrefix(clean, "pki/"); ok {
			pki[rel] = dst
		}
	}
	db := filepath.Join(tmp, "etcd-snapshot.db")
	if _, err := os.Stat(db); err != nil {
		return errors.New("failed to restore on step `etcd`: the archive holds no etcd-snapshot.db")
	}
	for rel, src := range pki {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, k0sPKIDir, rel)
		if have, err := os.ReadFile(dst); err == nil {
			if !bytes.Equal(have, data) {
				return fmt.Errorf("failed to restore on step `%s`: %s exists with other content", k0sPKIDir, filepath.Join(k0sPKIDir, rel))
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			return err
		}
	}
	if err := RestoreEtcdSnapshot(db, dataDir, name, peerURL); err != nil {
		return fmt.Errorf("failed to restore on step `etcd`: %w", err)
	}
	return nil
}

// runEtcdRestore runs the ExecStartPre lines of the document's restore drop-in of the
// distribution's unit (render.EtcdRestoreScript), as systemd runs them before the unit starts:
// with the host's /bin/sh and curl, the node's k0s or k3s command and its paths mapped
// (runScriptCommand). The preflight's drop-in is checked by the simulation itself (plan.preflight).
// A failing line fails the start, and systemd's restart tries again: the node retries with the
// script's reason.
func (n *Node) runEtcdRestore(ctx context.Context, p *plan) error {
	unit, ok := p.files["/etc/systemd/system/"+render.ServiceName(p.distribution, render.RoleControlPlane)+".service.d/"+render.EtcdRestoreDropIn]
	if !ok {
		return nil
	}
	for _, line := range strings.Split(unit, "\n") {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStartPre=")
		if !ok {
			continue
		}
		out, err := n.runScriptCommand(ctx, p, cmd)
		if err != nil {
			return retry(ReasonStartFailed, "restoring etcd: %v", err)
		}
		if out != "" {
			n.reg.log.Info("etcd restore", "providerID", n.spec.ProviderID, "output", lastLines(out, 3))
		}
	}
	return nil
}
