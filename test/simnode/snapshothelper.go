package simnode

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// The `k0s` and `k3s` commands of a simulated node are the test binary itself, run again with
// helperEnv set (the re-exec pattern of os/exec's own tests and docker's reexec): nodeCommands
// writes /usr/local/bin/k0s (or k3s) below the node's root as a two-line script that execs
// os.Executable() with the node's root and member. This package's init runs the command and
// exits before the test binary's main, so every test binary that imports simnode has them, at
// no build cost. What they do is the distribution's, for the simulated member:
//
//   - `k0s backup --save-path=DIR` (k0s pkg/backup: manager_unix.go RunBackup, etcd_unix.go):
//     a snapshot of the member (etcd's snapshot client, as k0s calls it) as etcd-snapshot.db,
//     the node's <data-dir>/pki below pki/, and k0s.yaml when the node has /etc/k0s/k0s.yaml,
//     in DIR/k0s_backup_<timestamp>.tar.gz (timestamp as k0s' "2006-01-02T15_04_05_000Z" names
//     it, docs.k0sproject.io backup). Manifests, image bundles and helm settings, which k0s also
//     archives, are not on simulated nodes.
//   - `k0s restore ARCHIVE` (K0sRestore, restore.go).
//   - `k3s etcd-snapshot save [--name N]` and `k3s etcd-snapshot prune [--name N]
//     [--snapshot-retention R]` with the settings of the node's k3s config files (k3sSave and
//     k3sPrune, snapshots.go).
const (
	helperEnv     = "KAIROS_SIMNODE_COMMAND"
	helperRootEnv = "KAIROS_SIMNODE_ROOT"
	helperEtcdEnv = "KAIROS_SIMNODE_ETCD"
	helperDataEnv = "KAIROS_SIMNODE_ETCD_DATA"
	helperPeerEnv = "KAIROS_SIMNODE_ETCD_PEER"
)

func init() {
	dist := os.Getenv(helperEnv)
	if dist == "" {
		return
	}
	root, endpoint := os.Getenv(helperRootEnv), os.Getenv(helperEtcdEnv)
	var err error
	switch render.Distribution(dist) {
	case render.K0s:
		err = k0sCommand(root, endpoint, os.Args[1:])
	case render.K3s:
		err = k3sCommand(root, endpoint, os.Getenv("NODE_NAME"), os.Args[1:])
	default:
		err = fmt.Errorf("unknown command %s", dist)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", dist, err)
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	os.Exit(0)
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// flagValue reads --name=value or --name value.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func k0sCommand(root, endpoint string, args []string) error {
	if len(args) == 2 && args[0] == "restore" {
		// k0s restores before the controller first starts: the member's data directory and
		// peer URL are the node's (the simulation keeps its member's data below
		// /var/lib/sim-etcd, not k0s' /var/lib/k0s/etcd).
		return K0sRestore(args[1], root, os.Getenv(helperDataEnv), os.Getenv("NODE_NAME"), os.Getenv(helperPeerEnv))
	}
	if len(args) == 0 || args[0] != "backup" {
		return usageError{"the simulated k0s runs only `backup --save-path=DIR` and `restore ARCHIVE`"}
	}
	dir, ok := flagValue(args[1:], "save-path")
	if !ok {
		dir = "."
	}
	if dir == "-" {
		return usageError{"--save-path=- (the archive on stdout) is not simulated"}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("the save path %s must be an existing directory", dir)
	}
	tmp, err := os.MkdirTemp(filepath.Join(root, "var", "lib", "k0s"), "k0s-backup")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	db := filepath.Join(tmp, "etcd-snapshot.db")
	if err := saveEtcdSnapshot(context.Background(), etcdAccessFor(render.K0s, root, endpoint), db); err != nil {
		return fmt.Errorf("failed to create backup on step `etcd`: %w", err)
	}
	name := "k0s_backup_" + time.Now().UTC().Format("2006-01-02T15_04_05_000Z") + ".tar.gz"
	out, err := os.OpenFile(filepath.Join(tmp, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := writeK0sArchive(out, root, db); err != nil {
		_ = out.Close()
		return fmt.Errorf("failed to create archive `%s`: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name))
}

// writeK0sArchive writes the archive's entries: etcd-snapshot.db, pki/..., k0s.yaml.
func writeK0sArchive(w io.Writer, root, db string) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	add := func(name, file string, mode fs.FileMode) error {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(mode.Perm()), Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	}
	if err := add("etcd-snapshot.db", db, 0o600); err != nil {
		return err
	}
	pki := filepath.Join(root, k0sPKIDir)
	err := filepath.WalkDir(pki, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".sim") {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(pki), p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return add(filepath.ToSlash(rel), p, info.Mode())
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", k0sPKIDir, err)
	}
	if _, err := os.Stat(filepath.Join(root, k0sConfigPath)); err == nil {
		if err := add("k0s.yaml", filepath.Join(root, k0sConfigPath), 0o600); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func k3sCommand(root, endpoint, node string, args []string) error {
	if len(args) < 2 || args[0] != "etcd-snapshot" {
		return usageError{"the simulated k3s runs only `etcd-snapshot save|prune`"}
	}
	if node == "" {
		return errors.New("NODE_NAME is not set")
	}
	var contents []string
	dir := filepath.Join(root, "etc", "rancher", "k3s")
	files := map[string]string{}
	for _, p := range append([]string{filepath.Join(dir, "config.yaml")}, globYAML(filepath.Join(dir, "config.yaml.d"))...) {
		if b, err := os.ReadFile(p); err == nil {
			rel, _ := filepath.Rel(root, p)
			files["/"+filepath.ToSlash(rel)] = string(b)
		}
	}
	for _, f := range k3sConfigFiles(files) {
		contents = append(contents, files[f])
	}
	cfg, err := parseK3sSnapshotConfig(contents)
	if err != nil {
		return err
	}
	rest := args[2:]
	name, ok := flagValue(rest, "name")
	if !ok {
		name = "on-demand" // k3s' default name of `etcd-snapshot save`
	}
	ctx := context.Background()
	switch args[1] {
	case "save":
		key, err := k3sSave(ctx, root, node, cfg, etcdAccessFor(render.K3s, root, endpoint), name)
		if err != nil {
			return fmt.Errorf("etcd-snapshot error: %w", err)
		}
		if key != "" {
			fmt.Printf("Snapshot %s saved and uploaded to s3://%s/%s\n", filepath.Base(key), cfg.Bucket, key)
		}
		return nil
	case "prune":
		retention := *cfg.Retention
		if v, ok := flagValue(rest, "snapshot-retention"); ok {
			if retention, err = strconv.Atoi(v); err != nil {
				return usageError{"--snapshot-retention " + v + " is not a number"}
			}
		}
		return k3sPrune(ctx, root, node, cfg, name, retention)
	default:
		return usageError{"the simulated k3s runs only `etcd-snapshot save|prune`"}
	}
}

func globYAML(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	return m
}
