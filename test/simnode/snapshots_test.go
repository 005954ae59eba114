package simnode_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/objectstore"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

const snapshotBucket = "site-backups"

// snapshotSettings sends a node's snapshots to the store every minute (the cron schedule the
// test waits for), keeping two of each kind.
func snapshotSettings(s *objectstore.Store, folder, secret string) *render.EtcdSnapshots {
	return &render.EtcdSnapshots{
		Schedule: "* * * * *", Retention: 2,
		Endpoint: s.Endpoint, Bucket: snapshotBucket, Folder: folder, Region: s.Region,
		CABundle: string(s.CAPEM), AccessKeyID: s.AccessKeyID, SecretAccessKey: secret,
	}
}

// TestEtcdSnapshots runs k0s and k3s control-plane nodes whose documents take etcd snapshots to
// an S3 store over HTTPS with Signature V4 (test/objectstore): k3s with its own schedule and S3
// client (simulated as k3s does it), k0s with the rendered timer and script (real sh, curl and
// the node's `k0s backup`). For each distribution, one node with the store's keys and one with a
// wrong secret start together, so that both wait for the same minute of the schedule:
//
//   - the scheduled snapshot lands under the documented name and folder, and restored with
//     etcd's own restore it holds a ConfigMap written before it and not one written after;
//   - retention keeps the newest two of the node's scheduled snapshots (older ones seeded in the
//     bucket before the node started), and leaves another node's and another kind's alone;
//   - the node with the wrong secret records the store's refusal, uploads nothing, and shows no
//     secret;
//   - Node.Upgrade runs the document's before-upgrade stage: the pre-upgrade snapshot is in the
//     store when the node starts rebooting, with a ConfigMap written just before the upgrade.
func TestEtcdSnapshots(t *testing.T) {
	t.Parallel() // its own Registry and store
	reg := newRegistry(t)
	store := objectstore.Start(t, objectstore.Options{Buckets: []string{snapshotBucket}, Region: "eu-west-1"})
	for _, dist := range []render.Distribution{render.K0s, render.K3s} {
		t.Run(string(dist), func(t *testing.T) {
			// Both distributions wait for the same minute of the schedule.
			t.Parallel()
			testEtcdSnapshots(t, reg, store, dist)
		})
	}
}

func testEtcdSnapshots(t *testing.T, reg *simnode.Registry, store *objectstore.Store, dist render.Distribution) {
	start := time.Now()
	ext := ""
	if dist == render.K0s {
		ext = ".tar.gz"
	}
	folder := "edge/test/" + string(dist)
	badFolder := "edge/bad/" + string(dist)
	// Older scheduled snapshots of this node, one of another node, and a pre-upgrade one: the
	// first scheduled run keeps the newest two of the node's own scheduled ones.
	old := time.Now().Add(-time.Hour).Unix()
	seeded := map[string]string{
		"oldest":      fmt.Sprintf("%s/sim-cp-0-%d%s", folder, old-100, ext),
		"older":       fmt.Sprintf("%s/sim-cp-0-%d%s", folder, old, ext),
		"other-node":  fmt.Sprintf("%s/sim-cp-9-%d%s", folder, old-200, ext),
		"pre-upgrade": fmt.Sprintf("%s/pre-upgrade-sim-cp-0-%d%s", folder, old-300, ext),
	}
	for _, key := range seeded {
		if _, err := store.Backend.PutObject(snapshotBucket, key, nil, strings.NewReader("seeded"), 6, nil); err != nil {
			t.Fatal(err)
		}
	}

	w := newWorld(t, reg, dist)
	bad := newWorld(t, reg, dist)
	const wrongSecret = "wrong-secret-0123456789abcdef"
	cp := w.start(string(dist)+"-cp-0", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-0",
		EtcdSnapshots: snapshotSettings(store, folder, store.SecretAccessKey)}), "")
	badCP := bad.start(string(dist)+"-bad-cp-0", bad.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: bad.pki, JoinToken: bad.k3sToken, Hostname: "bad-cp-0",
		EtcdSnapshots: snapshotSettings(store, badFolder, wrongSecret)}), "")
	waitPhase(t, cp, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	waitPhase(t, badCP, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	admin := reg.Cluster(w.endpointString()).AdminClient()
	configMap := func(name string) {
		t.Helper()
		if err := admin.Create(w.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	configMap("before-snapshot")
	written := time.Now()
	t.Logf("%s: nodes running after %s", dist, time.Since(start).Round(time.Second))
	// An on-demand request, as the control plane hands it over: the request timer reads it at
	// the same minute as the schedule's.
	request := func(c client.Client, value string, at time.Time) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: render.EtcdSnapshotRequestConfigMap}}
		if _, err := controllerutil.CreateOrUpdate(w.ctx, c, cm, func() error {
			cm.Data = map[string]string{render.EtcdSnapshotRequestConfigMapKey: value, render.EtcdSnapshotRequestedAtKey: strconv.FormatInt(at.Unix(), 10)}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	request(admin, "r1", time.Now())

	// The first scheduled run that started after the ConfigMap was written.
	var run simnode.SnapshotRun
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, r := range cp.Snapshots() {
			if r.Kind == simnode.SnapshotScheduled && r.Time.After(written) {
				run = r
				return nil
			}
		}
		return fmt.Errorf("no scheduled snapshot after %s yet: %+v", written.Format(time.TimeOnly), cp.Snapshots())
	})
	configMap("after-snapshot")
	if run.Err != nil {
		t.Fatalf("the scheduled snapshot failed: %v\n%s", run.Err, run.Output)
	}
	key := run.Key
	if dist == render.K0s {
		// The rendered script says what it uploaded.
		m := regexp.MustCompile(`uploaded to s3://` + snapshotBucket + `/(\S+)`).FindStringSubmatch(run.Output)
		if m == nil {
			t.Fatalf("the script's output names no upload:\n%s", run.Output)
		}
		key = m[1]
	}
	// <folder>/<cluster>-<node>-<unix time>[.tar.gz]
	if want := regexp.MustCompile(`^` + regexp.QuoteMeta(folder+"/sim-cp-0-") + `(\d+)` + regexp.QuoteMeta(ext) + `$`); !want.MatchString(key) {
		t.Fatalf("uploaded %q, not <folder>/<cluster>-<node>-<unix time>%s", key, ext)
	} else if ts, _ := strconv.ParseInt(want.FindStringSubmatch(key)[1], 10, 64); ts < written.Unix()-1 || ts > time.Now().Unix() {
		t.Errorf("the name's time %d is not the snapshot's", ts)
	}
	keys := storeKeys(t, store)
	mine := filterPrefix(keys, folder+"/sim-cp-0-")
	if len(mine) != 2 || !slices.Contains(mine, key) || slices.Contains(mine, seeded["oldest"]) {
		t.Errorf("retention 2 left %q of the node's scheduled snapshots (uploaded %s)", mine, key)
	}
	if !slices.Contains(keys, seeded["other-node"]) || !slices.Contains(keys, seeded["pre-upgrade"]) {
		t.Errorf("retention removed another node's or another kind's snapshot: %q", keys)
	}
	holds(t, store, dist, key, "before-snapshot", "after-snapshot")

	// The on-demand request: one snapshot of that kind, named as such, holding what was written
	// before the request; the value is recorded as handled, so that the next minutes take none.
	var onDemand simnode.SnapshotRun
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, r := range cp.Snapshots() {
			if r.Kind == simnode.SnapshotOnDemand {
				onDemand = r
				return nil
			}
		}
		return fmt.Errorf("no on-demand snapshot yet: %+v", cp.Snapshots())
	})
	if onDemand.Err != nil || !strings.Contains(onDemand.Output, "on-demand etcd snapshot requested (r1)") {
		t.Fatalf("the on-demand request's run: %v\n%s", onDemand.Err, onDemand.Output)
	}
	onDemandKeys := filterPrefix(storeKeys(t, store), folder+"/on-demand-sim-cp-0-")
	if len(onDemandKeys) != 1 {
		t.Fatalf("on-demand snapshots in the store: %q (run output:\n%s)", onDemandKeys, onDemand.Output)
	}
	holds(t, store, dist, onDemandKeys[0], "before-snapshot", "")
	if handled, err := os.ReadFile(filepath.Join(cp.Root(), render.EtcdSnapshotRequestHandled)); err != nil || string(handled) != "r1" {
		t.Errorf("the node recorded %q as the request handled (%v), want r1", handled, err)
	}
	// The node with the wrong secret: refused by the store, nothing uploaded, no secret shown.
	framework.Eventually(t, 2*time.Minute, func() error {
		if len(badCP.Snapshots()) == 0 {
			return fmt.Errorf("no scheduled run yet")
		}
		return nil
	})
	badErr := badCP.LastSnapshotError()
	if badErr == nil {
		t.Fatalf("a snapshot with the wrong secret succeeded: %+v", badCP.Snapshots())
	}
	refusal := "SignatureDoesNotMatch"
	if dist == render.K0s {
		refusal = "403" // curl --fail: "The requested URL returned error: 403"
	}
	t.Logf("%s: with the wrong secret: %v", dist, badErr)
	if !strings.Contains(badErr.Error(), refusal) {
		t.Errorf("the failure does not say why (%s): %v", refusal, badErr)
	}
	for _, r := range badCP.Snapshots() {
		if strings.Contains(fmt.Sprint(r.Err)+r.Output, wrongSecret) {
			t.Errorf("a snapshot run shows the secret: %v %s", r.Err, r.Output)
		}
	}
	if got := filterPrefix(storeKeys(t, store), badFolder+"/"); len(got) != 0 {
		t.Errorf("the refused node uploaded %q", got)
	}
	t.Logf("%s: scheduled snapshots checked after %s", dist, time.Since(start).Round(time.Second))

	// Before an in-place upgrade: the before-upgrade stage's snapshot is in the store before
	// the node reboots.
	configMap("before-upgrade")
	beforeReboot := time.Now()
	var mu sync.Mutex
	var atReboot []string
	unsubscribe := reg.Subscribe(func(e simnode.NodeEvent) {
		if e.ProviderID != cp.ProviderID() || cp.Status().Reason != simnode.ReasonRebooting {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if atReboot == nil {
			atReboot, _ = store.Keys(snapshotBucket)
		}
	})
	// The node with the wrong secret upgrades at the same time: its before-upgrade step fails,
	// and kairos-agent, not strict, goes on with the upgrade.
	badUpgrade := make(chan error, 1)
	go func() { badUpgrade <- badCP.Upgrade(bad.ctx, simnode.KairosImage(dist, "v1.37.0")) }()
	err := cp.Upgrade(w.ctx, simnode.KairosImage(dist, "v1.37.0"))
	unsubscribe()
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if err := <-badUpgrade; err != nil {
		t.Errorf("the upgrade of the node whose pre-upgrade snapshot failed: %v (kairos-agent is not strict: it goes on)", err)
	}
	if runs := badCP.Snapshots(); runs[len(runs)-1].Kind != simnode.SnapshotBeforeUpgrade || runs[len(runs)-1].Err == nil {
		t.Errorf("the failed pre-upgrade snapshot is not recorded: %+v", runs[len(runs)-1])
	}
	if got := filterPrefix(storeKeys(t, store), badFolder+"/"); len(got) != 0 {
		t.Errorf("the refused node uploaded %q", got)
	}
	mu.Lock()
	pre := filterPrefix(atReboot, folder+"/pre-upgrade-sim-cp-0-")
	mu.Unlock()
	if len(pre) != 2 { // the seeded one and the new one: retention 2 of that kind
		t.Fatalf("pre-upgrade snapshots in the store when the node rebooted: %q (snapshot runs %+v)", pre, cp.Snapshots())
	}
	newest := pre[0]
	if newest == seeded["pre-upgrade"] {
		newest = pre[1]
	}
	holds(t, store, dist, newest, "before-upgrade", "")
	if err := cp.LastSnapshotError(); err != nil {
		t.Errorf("the pre-upgrade snapshot: %v", err)
	}
	// The cluster is lost: its only node and its API server are gone, as when the VM is
	// destroyed. A replacement with the same endpoint, PKI, tokens and snapshot settings whose
	// document restores (render.EtcdSnapshots.Restore) runs the rendered restore before its
	// distribution starts: it skips a corrupt snapshot that names a later time (and on k3s one
	// of another cluster) and restores the newest good one with etcd's own restore; the cluster then serves exactly that snapshot's
	// objects, and the node reports which one it restored.
	// A request made before the reboot and not handled yet (written now, dated before the
	// upgrade) is taken after it: the node first bootstrapped before it, whatever its reboots.
	request(admin, "r2", beforeReboot)
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, r := range cp.Snapshots() {
			if r.Kind == simnode.SnapshotOnDemand && strings.Contains(r.Output, "on-demand etcd snapshot requested (r2)") {
				return r.Err
			}
		}
		return fmt.Errorf("no on-demand snapshot for r2 yet: %+v", cp.Snapshots())
	})
	// The schedule's run of this minute may still be taking its snapshot (the request timer
	// fires at the same minute): wait until it is recorded (at its end), so that what follows is
	// written after it.
	tick := time.Now().Truncate(time.Minute)
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, r := range cp.Snapshots() {
			if r.Kind == simnode.SnapshotScheduled && !r.Time.Before(tick) {
				return nil
			}
		}
		return fmt.Errorf("no scheduled snapshot since %s has ended", tick.Format(time.TimeOnly))
	})
	if n := len(slices.DeleteFunc(cp.Snapshots(), func(r simnode.SnapshotRun) bool {
		return r.Kind != simnode.SnapshotOnDemand || !strings.Contains(r.Output, "on-demand etcd snapshot requested")
	})); n != 2 {
		t.Errorf("%d on-demand snapshots for two requests (r1 taken once, r2): %+v", n, cp.Snapshots())
	}
	if got := filterPrefix(storeKeys(t, store), folder+"/on-demand-sim-cp-0-"); len(got) != 2 {
		t.Errorf("on-demand snapshots in the store: %q, want r1's and r2's", got)
	}
	configMap("after-last-snapshot")
	reg.StopCluster(w.endpointString())
	var objs []etcdsnapshots.Object
	for _, k := range storeKeys(t, store) {
		objs = append(objs, etcdsnapshots.Object{Key: k})
	}
	newestGood := etcdsnapshots.Newest("sim", folder, objs)["cp-0"].Key
	corrupt := fmt.Sprintf("%s/sim-cp-0-%d%s", folder, time.Now().Unix()+3600, ext)
	if _, err := store.Backend.PutObject(snapshotBucket, corrupt, nil, strings.NewReader("not a snapshot"), 14, nil); err != nil {
		t.Fatal(err)
	}
	if dist == render.K3s {
		// A snapshot of another cluster (the node with the wrong secret kept its scheduled
		// snapshots locally), named as this node's and newer than its good ones: k3s cannot
		// decrypt its bootstrap data with this cluster's token and refuses it.
		dir := filepath.Join(badCP.Root(), "var/lib/rancher/k3s/server/db/snapshots")
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			t.Fatalf("the other cluster's node kept no local snapshot (%v)", err)
		}
		foreign, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/sim-cp-0-%d", folder, time.Now().Unix()+1800)
		if _, err := store.Backend.PutObject(snapshotBucket, key, nil, bytes.NewReader(foreign), int64(len(foreign)), nil); err != nil {
			t.Fatal(err)
		}
	}
	settings := snapshotSettings(store, folder, store.SecretAccessKey)
	settings.Restore = true
	replacement := w.start(string(dist)+"-cp-r", w.doc(render.Node{Role: render.RoleControlPlane, Init: true, PKI: w.pki, JoinToken: w.k3sToken, Hostname: "cp-r",
		EtcdSnapshots: settings}), "")
	waitPhase(t, replacement, simnode.PhaseRunning, simnode.ReasonRunning, 2*time.Minute)
	radmin := reg.Cluster(w.endpointString()).AdminClient()
	report := &corev1.ConfigMap{}
	if err := radmin.Get(w.ctx, client.ObjectKey{Namespace: "kube-system", Name: render.EtcdRestoreConfigMap}, report); err != nil {
		t.Fatalf("the restoring node reported nothing: %v", err)
	}
	if want := strings.TrimPrefix(newestGood, folder+"/"); report.Data["snapshot"] != want || report.Data["node"] != "cp-r" || report.Data["restored"] == "" {
		t.Errorf("the report says %v, want the newest good snapshot %s restored on cp-r", report.Data, want)
	}
	inSnapshot := snapshotConfigMaps(t, store, dist, newestGood)
	for _, name := range []string{"before-snapshot", "after-snapshot", "before-upgrade", "after-last-snapshot"} {
		err := radmin.Get(w.ctx, client.ObjectKey{Namespace: "default", Name: name}, &corev1.ConfigMap{})
		switch {
		case inSnapshot[name] && err != nil:
			t.Errorf("the restored cluster lost ConfigMap %s, which the snapshot holds: %v", name, err)
		case !inSnapshot[name] && !apierrors.IsNotFound(err):
			t.Errorf("the restored cluster has ConfigMap %s, which the snapshot does not hold (%v)", name, err)
		}
	}
	if !inSnapshot["before-snapshot"] || inSnapshot["after-last-snapshot"] {
		t.Errorf("the newest good snapshot holds %v: not taken between the first and the last ConfigMap", inSnapshot)
	}
	// The restored cluster holds the last request, made before the replacement bootstrapped: it
	// is recorded as handled, and no snapshot is taken for it.
	restoredRequest := &corev1.ConfigMap{}
	if err := radmin.Get(w.ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: render.EtcdSnapshotRequestConfigMap}, restoredRequest); err != nil {
		t.Fatalf("the restored cluster has no snapshot request: %v", err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		for _, r := range replacement.Snapshots() {
			if r.Kind == simnode.SnapshotOnDemand {
				if r.Err != nil || !strings.Contains(r.Output, "is from before this node bootstrapped: not taken") {
					return fmt.Errorf("the replacement's request run: %v\n%s", r.Err, r.Output)
				}
				return nil
			}
		}
		return fmt.Errorf("the replacement has not read the restored request (%s) yet", restoredRequest.Data[render.EtcdSnapshotRequestConfigMapKey])
	})
	if handled, err := os.ReadFile(filepath.Join(replacement.Root(), render.EtcdSnapshotRequestHandled)); err != nil || string(handled) != restoredRequest.Data[render.EtcdSnapshotRequestConfigMapKey] {
		t.Errorf("the replacement recorded %q (%v) as handled, want the restored request %q", handled, err, restoredRequest.Data[render.EtcdSnapshotRequestConfigMapKey])
	}
	t.Logf("%s: done after %s", dist, time.Since(start).Round(time.Second))
}

func storeKeys(t *testing.T, s *objectstore.Store) []string {
	t.Helper()
	keys, err := s.Keys(snapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func filterPrefix(keys []string, prefix string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// holds downloads a snapshot, restores it with etcd's restore, and checks that the ConfigMap
// present was written before it and absent ("" for none) after it.
func holds(t *testing.T, s *objectstore.Store, dist render.Distribution, key, present, absent string) {
	t.Helper()
	data, err := s.Object(snapshotBucket, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "snapshot.db")
	if dist == render.K0s {
		names, err := simnode.K0sBackupEntries(bytes.NewReader(data), db)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, want := range []string{"etcd-snapshot.db", "pki/ca.crt", "pki/etcd/ca.crt", "pki/sa.key"} {
			if !slices.Contains(names, want) {
				t.Errorf("the k0s backup archive %s has no %s: %q", key, want, names)
			}
		}
	} else if err := os.WriteFile(db, data, 0o600); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored")
	if dist == render.K0s {
		// What `k0s restore` does with the archive on a new controller: etcd and its PKI.
		archive := filepath.Join(dir, filepath.Base(key))
		if err := os.WriteFile(archive, data, 0o600); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, "node")
		if err := simnode.K0sRestore(archive, root, restored, "cp-1", "https://127.0.0.1:2380"); err != nil {
			t.Fatalf("k0s restore %s: %v", key, err)
		}
		if _, err := os.Stat(filepath.Join(root, "var/lib/k0s/pki/sa.key")); err != nil {
			t.Errorf("k0s restore wrote no service-account key: %v", err)
		}
		if err := simnode.K0sRestore(archive, root, restored, "cp-1", "https://127.0.0.1:2380"); err == nil || !strings.Contains(err.Error(), "already holds an etcd member") {
			t.Errorf("k0s restore over a restored member: %v", err)
		}
	} else if err := simnode.RestoreEtcdSnapshot(db, restored, "restored", "https://127.0.0.1:2380"); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	keys, err := simnode.EtcdKeys(restored)
	if err != nil {
		t.Fatal(err)
	}
	has := func(name string) bool {
		return slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "/configmaps/default/"+name) })
	}
	if !has(present) {
		t.Errorf("the snapshot %s, restored, has no ConfigMap %s (%d keys)", key, present, len(keys))
	}
	if absent != "" && has(absent) {
		t.Errorf("the snapshot %s, restored, has the ConfigMap %s written after it", key, absent)
	}
}

// snapshotConfigMaps lists the default namespace's ConfigMaps that a snapshot in the store holds
// (restored with etcd's own restore into a scratch folder).
func snapshotConfigMaps(t *testing.T, s *objectstore.Store, dist render.Distribution, key string) map[string]bool {
	t.Helper()
	data, err := s.Object(snapshotBucket, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "snapshot.db")
	if dist == render.K0s {
		if _, err := simnode.K0sBackupEntries(bytes.NewReader(data), db); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	} else if err := os.WriteFile(db, data, 0o600); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored")
	if err := simnode.RestoreEtcdSnapshot(db, restored, "check", "https://127.0.0.1:2380"); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	keys, err := simnode.EtcdKeys(restored)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		if _, name, ok := strings.Cut(k, "/configmaps/default/"); ok {
			out[name] = true
		}
	}
	return out
}
