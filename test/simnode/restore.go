package simnode

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
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
	err := etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                name,
		OutputDataDir:       dataDir,
		PeerURLs:            []string{peerURL},
		InitialCluster:      name + "=" + peerURL,
		InitialClusterToken: "etcd-cluster",
	})
	if err != nil {
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
