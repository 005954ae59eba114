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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	helperNameEnv = "KAIROS_SIMNODE_ETCD_NAME"
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

// adminKubeconfigPath is where the distribution writes the admin kubeconfig on a server, which
// its kubectl reads (k3s: /etc/rancher/k3s/k3s.yaml; k0s: <data-dir>/pki/admin.conf).
func adminKubeconfigPath(d render.Distribution) string {
	if d == render.K3s {
		return "/etc/rancher/k3s/k3s.yaml"
	}
	return k0sPKIDir + "/admin.conf"
}

// kubectl is `k0s kubectl` or `k3s kubectl` with the node's admin kubeconfig, for what the
// documents' scripts run: `apply -f -` (the objects of the YAML documents on stdin, server-side
// applied: kube-system/kairos-capi-etcd-restore) and `get configmap -n NS NAME
// --ignore-not-found -o jsonpath=TEMPLATE` with {.data.KEY} fields (the on-demand snapshot
// request). Anything else is refused, so that a script that needs more of kubectl fails here
// until the simulation is taught it.
func kubectl(root string, dist render.Distribution, args []string) error {
	kubeconfig, err := os.ReadFile(filepath.Join(root, adminKubeconfigPath(dist)))
	if err != nil {
		return fmt.Errorf("the admin kubeconfig: %w", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	switch {
	case slices.Equal(args, []string{"apply", "-f", "-"}):
		return kubectlApply(c)
	case len(args) > 0 && args[0] == "get":
		return kubectlGetConfigMapData(c, args[1:])
	}
	return usageError{"the simulated " + string(dist) + " kubectl runs only `apply -f -` and `get configmap -n NS NAME --ignore-not-found -o jsonpath=TEMPLATE`"}
}

// kubectlGetConfigMapData prints keys of a ConfigMap as kubectl's jsonpath output does: the
// template's {.data.KEY} replaced by the values, its other text as it is, no newline; with
// --ignore-not-found a missing ConfigMap prints nothing and succeeds, as kubectl does.
func kubectlGetConfigMapData(c client.Client, args []string) error {
	var ns, name, output string
	ignoreNotFound := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "configmap" && i == 0:
		case a == "-n" && i+1 < len(args):
			i++
			ns = args[i]
		case a == "--ignore-not-found":
			ignoreNotFound = true
		case a == "-o" && i+1 < len(args):
			i++
			output = args[i]
		case !strings.HasPrefix(a, "-") && name == "" && i > 0:
			name = a
		default:
			return usageError{fmt.Sprintf("kubectl get: %q is not understood by the simulation", a)}
		}
	}
	template, ok := strings.CutPrefix(output, "jsonpath=")
	if !ok || len(args) == 0 || args[0] != "configmap" || ns == "" || name == "" ||
		strings.Contains(jsonpathDataKey.ReplaceAllString(template, ""), "{") {
		return usageError{"the simulated kubectl gets only `configmap -n NS NAME [--ignore-not-found] -o jsonpath=TEMPLATE` whose fields are {.data.KEY}"}
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) && ignoreNotFound {
			return nil
		}
		return fmt.Errorf("Error from server: %w", err)
	}
	fmt.Print(jsonpathDataKey.ReplaceAllStringFunc(template, func(f string) string {
		return cm.Data[jsonpathDataKey.FindStringSubmatch(f)[1]]
	}))
	return nil
}

// jsonpathDataKey is a {.data.KEY} field of a jsonpath template.
var jsonpathDataKey = regexp.MustCompile(`\{\.data\.([A-Za-z0-9._-]+)\}`)

// kubectlApply server-side applies the objects of the YAML documents on stdin.
func kubectlApply(c client.Client) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(os.Stdin, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("error: the input is not YAML: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := c.Patch(context.Background(), obj, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		fmt.Printf("%s/%s serverside-applied\n", strings.ToLower(obj.GetKind()), obj.GetName())
	}
}

func k0sCommand(root, endpoint string, args []string) error {
	if len(args) > 0 && args[0] == "kubectl" {
		return kubectl(root, render.K0s, args[1:])
	}
	if len(args) >= 2 && args[0] == "restore" {
		// k0s restores before the controller first starts: the member's data directory and
		// peer URL are the node's (the simulation keeps its member's data below
		// /var/lib/sim-etcd, not k0s' /var/lib/k0s/etcd). --config-out names where k0s writes
		// the archive's k0s.yaml, which the simulation does not need.
		rest := args[1:]
		if len(rest) == 2 && strings.HasPrefix(rest[0], "--config-out=") {
			rest = rest[1:]
		}
		if len(rest) != 1 {
			return usageError{"usage: k0s restore [--config-out=FILE] ARCHIVE"}
		}
		return K0sRestore(rest[0], root, os.Getenv(helperDataEnv), os.Getenv(helperNameEnv), os.Getenv(helperPeerEnv))
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
	if len(args) > 0 && args[0] == "kubectl" {
		return kubectl(root, render.K3s, args[1:])
	}
	if len(args) >= 2 && args[0] == "server" && slices.Contains(args[1:], "--cluster-reset") {
		name, ok := flagValue(args[1:], "cluster-reset-restore-path")
		if !ok || name == "" {
			return usageError{"the simulated k3s server runs only as --cluster-reset --cluster-reset-restore-path=NAME"}
		}
		cfg, err := k3sConfigOf(root)
		if err != nil {
			return err
		}
		token, err := k3sRestoreToken(root, cfg, args[1:])
		if err != nil {
			return err
		}
		return k3sResetFromSnapshot(context.Background(), root, cfg, name, token, os.Getenv(helperDataEnv), os.Getenv(helperNameEnv), os.Getenv(helperPeerEnv))
	}
	if len(args) < 2 || args[0] != "etcd-snapshot" {
		return usageError{"the simulated k3s runs only `etcd-snapshot save|prune` and `server --cluster-reset`"}
	}
	if node == "" {
		return errors.New("NODE_NAME is not set")
	}
	cfg, err := k3sConfigOf(root)
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

// k3sRestoreToken is the token a k3s server restoring a snapshot uses to decrypt the snapshot's
// bootstrap data: --token, --token-file (flags, then config files), else the token file of an
// earlier start, <data-dir>/server/token. Without any, k3s refuses to restore (k3s
// pkg/cli/server/server.go: "<data-dir>/server/token does not exist, please pass --token to
// complete the restoration"), as on a new host. Paths in args are mapped below root already
// (runScriptCommand); those of the config files are the node's.
func k3sRestoreToken(root string, cfg k3sSnapshotConfig, args []string) (string, error) {
	onHost := func(p string) string {
		if p == "" {
			return ""
		}
		return filepath.Join(root, p)
	}
	token, file, dataDir := cfg.Token, onHost(cfg.TokenFile), onHost(cfg.DataDir)
	if v, ok := flagValue(args, "token"); ok {
		token = v
	}
	if v, ok := flagValue(args, "token-file"); ok {
		file = v
	}
	if v, ok := flagValue(args, "data-dir"); ok {
		dataDir = v
	}
	if token != "" {
		return token, nil
	}
	if dataDir == "" {
		dataDir = onHost("/var/lib/rancher/k3s")
	}
	if file == "" {
		file = filepath.Join(dataDir, "server", "token")
		if _, err := os.Stat(file); os.IsNotExist(err) {
			return "", errors.New(strings.TrimPrefix(file, root) + " does not exist, please pass --token to complete the restoration")
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// k3sConfigOf reads the snapshot settings of the node's k3s config files, in k3s' order.
func k3sConfigOf(root string) (k3sSnapshotConfig, error) {
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
	return parseK3sSnapshotConfig(contents)
}

func globYAML(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	return m
}
