package simnode

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// etcd snapshots, as the distributions take them (docs/backups.md):
//
//   - k3s servers whose document writes render.K3sEtcdSnapshotConfigPath do what k3s does with
//     those keys: on the etcd-snapshot-schedule-cron schedule (parsed with robfig/cron/v3's
//     standard parser, the one k3s uses), a real snapshot of the node's own member
//     (go.etcd.io/etcd/client/v3/snapshot, as k3s' and k0s' own code call it), named
//     <etcd-snapshot-name>-<node name>-<unix time> (k3s pkg/etcd/snapshot.go,
//     fmt.Sprintf("%s-%s-%d", EtcdSnapshotName, NODE_NAME, now.Unix())), kept in
//     ${data-dir}/server/db/snapshots and uploaded with the S3 protocol
//     (aws-sdk-go-v2/service/s3; k3s uses minio-go) to <etcd-s3-folder>/<name>, path-style, over
//     HTTPS trusting etcd-s3-endpoint-ca, signed with etcd-s3-access-key/-secret-key for
//     etcd-s3-region; then retention: the newest etcd-snapshot-retention objects whose key starts
//     with <folder>/<name>-<node name> are kept (k3s pkg/etcd/s3.go snapshotPrefix and
//     snapshotRetention), locally and in the bucket. k3s' .metadata/ objects are not written:
//     nothing here reads them. `k3s etcd-snapshot save|prune` (the rendered script's commands)
//     is the same code, run as a command (snapshothelper.go).
//   - k0s controllers whose document starts render.EtcdSnapshotTimer in its network stage run
//     the unit's ExecStart (the rendered etcd-snapshot.sh, with the host's /bin/sh, curl, sed,
//     awk...) on the timer's OnCalendar schedule (oncalendar.go), as systemd would; the script's
//     `k0s backup` is the `k0s` command of the node (snapshothelper.go): a real snapshot of the
//     member and the node's PKI in a k0s_backup_<timestamp>.tar.gz archive.
//   - Before an in-place upgrade, Node.Upgrade runs the document's before-upgrade stage
//     (runStage), whose kairos-capi step runs `etcd-snapshot.sh save pre-upgrade`.
//
// The node's files are below its root directory. Commands of the document run with the host's
// programs (/bin/sh, curl, coreutils: what the image's read-only system would give them), and
// the absolute paths of the node's own trees (/etc, /var, /run, /usr/local: what Kairos keeps
// persistent or writes at boot) are mapped below the root: nodePaths rewrites exactly those
// path prefixes in a command, a unit line or a script before it runs, and nothing else of it.
// The node's own programs (k0s, k3s, hostname) are in its /usr/local/bin, first on the
// scripts' PATH as on a Kairos node.

// SnapshotRun is one snapshot the node took, or tried to take.
type SnapshotRun struct {
	// Kind is scheduled (the distribution's schedule) or before-upgrade (the document's
	// before-upgrade stage).
	Kind string
	// Time is when the run started.
	Time time.Time
	// Key is the object key uploaded (k3s scheduled snapshots; "" when the rendered script ran,
	// whose output says what it uploaded).
	Key string
	// Output is what the command printed (script runs), without secrets: the scripts never print
	// the credentials.
	Output string
	// Err is why the run failed, nil when it succeeded.
	Err error
}

// Snapshot kinds of SnapshotRun.
const (
	SnapshotScheduled     = "scheduled"
	SnapshotBeforeUpgrade = "before-upgrade"
	// SnapshotOnDemand: the on-demand request timer's unit took one, or failed.
	SnapshotOnDemand = "on-demand"
)

// snapshotState is a node's record of its snapshot runs.
type snapshotState struct {
	mu   sync.Mutex
	runs []SnapshotRun
	// started tells that the schedule runs (once per node: it survives reboots, and skips the
	// times at which the node or its member does not run, as a machine that is off takes none).
	started bool
	wg      sync.WaitGroup
	// access serializes snapshotAccess: the schedule's unit and the request timer's run at the
	// same minute, and two first calls would each issue a client certificate and key, the files
	// of one pair ending up beside the other's (seen under a CPU quota).
	access sync.Mutex
}

// Snapshots returns the node's snapshot runs, oldest first.
func (n *Node) Snapshots() []SnapshotRun {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	return slices.Clone(n.snaps.runs)
}

// LastSnapshotError is why the node's last snapshot run failed, nil when it succeeded or none
// ran.
func (n *Node) LastSnapshotError() error {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	if len(n.snaps.runs) == 0 {
		return nil
	}
	return n.snaps.runs[len(n.snaps.runs)-1].Err
}

func (n *Node) recordSnapshot(r SnapshotRun) {
	n.snaps.mu.Lock()
	n.snaps.runs = append(n.snaps.runs, r)
	n.snaps.mu.Unlock()
	if r.Err != nil {
		n.reg.log.Info("etcd snapshot failed", "providerID", n.spec.ProviderID, "kind", r.Kind, "error", r.Err.Error())
	}
}

// Paths of the distributions' etcd client credentials on a control-plane node: what k3s
// (server/tls/etcd/client.crt, signed by server/tls/etcd/server-ca.crt) and k0s
// (pki/apiserver-etcd-client.crt, pki/etcd/ca.crt; k0s pkg/etcd NewClient) use to reach their
// member, and where `k0s backup` and `k3s etcd-snapshot` find them.
const (
	k3sEtcdClientCert = "/var/lib/rancher/k3s/server/tls/etcd/client.crt"
	k3sEtcdClientKey  = "/var/lib/rancher/k3s/server/tls/etcd/client.key"
	k3sEtcdCA         = "/var/lib/rancher/k3s/server/tls/etcd/server-ca.crt"
	k3sSnapshotDir    = "/var/lib/rancher/k3s/server/db/snapshots"
	k0sEtcdClientCert = k0sPKIDir + "/apiserver-etcd-client.crt"
	k0sEtcdClientKey  = k0sPKIDir + "/apiserver-etcd-client.key"
	k0sEtcdCA         = k0sPKIDir + "/etcd/ca.crt"
	nodeBinDir        = "/usr/local/bin"
)

// etcdAccess is how a node's own tools reach its own member: its loopback client URL (the
// simulation serves each node's 127.0.0.1:2379 at <node address>:12379, members.go) with the
// distribution's client certificate.
type etcdAccess struct {
	endpoint                 string
	certFile, keyFile, caCrt string
}

func etcdAccessFor(dist render.Distribution, root, endpoint string) etcdAccess {
	at := func(p string) string { return filepath.Join(root, p) }
	if dist == render.K3s {
		return etcdAccess{endpoint: endpoint, certFile: at(k3sEtcdClientCert), keyFile: at(k3sEtcdClientKey), caCrt: at(k3sEtcdCA)}
	}
	return etcdAccess{endpoint: endpoint, certFile: at(k0sEtcdClientCert), keyFile: at(k0sEtcdClientKey), caCrt: at(k0sEtcdCA)}
}

// saveEtcdSnapshot writes a snapshot of the member's backend to path: etcd's own snapshot
// client (Maintenance.Snapshot, then the checksum check), as k3s and k0s call it.
func saveEtcdSnapshot(ctx context.Context, a etcdAccess, path string) error {
	pair, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
	if err != nil {
		return fmt.Errorf("loading the etcd client certificate: %w", err)
	}
	ca, err := os.ReadFile(a.caCrt)
	if err != nil {
		return fmt.Errorf("reading the etcd CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s holds no certificate", a.caCrt)
	}
	cfg := clientv3.Config{
		Endpoints:   []string{"https://" + a.endpoint},
		DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}},
		Logger:      zap.NewNop(),
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, path); err != nil {
		return fmt.Errorf("taking the etcd snapshot: %w", err)
	}
	return nil
}

// k3sSnapshotConfig is what k3s reads from its config files for snapshots (the keys are its
// flags, docs.k3s.io/cli/etcd-snapshot), and for a restore the token and data directory.
type k3sSnapshotConfig struct {
	Token      string `yaml:"token"`
	TokenFile  string `yaml:"token-file"`
	DataDir    string `yaml:"data-dir"`
	Schedule   string `yaml:"etcd-snapshot-schedule-cron"`
	Retention  *int   `yaml:"etcd-snapshot-retention"`
	Name       string `yaml:"etcd-snapshot-name"`
	Disable    bool   `yaml:"etcd-disable-snapshots"`
	S3         bool   `yaml:"etcd-s3"`
	Endpoint   string `yaml:"etcd-s3-endpoint"`
	EndpointCA string `yaml:"etcd-s3-endpoint-ca"`
	Bucket     string `yaml:"etcd-s3-bucket"`
	Folder     string `yaml:"etcd-s3-folder"`
	Region     string `yaml:"etcd-s3-region"`
	AccessKey  string `yaml:"etcd-s3-access-key"`
	SecretKey  string `yaml:"etcd-s3-secret-key"`
	Insecure   bool   `yaml:"etcd-s3-insecure"`
}

// k3sConfigFiles are k3s' config files in the order it reads them: config.yaml, then
// config.yaml.d/*.yaml in lexical order, later values replacing earlier ones
// (docs.k3s.io/installation/configuration, "Multiple Config Files").
func k3sConfigFiles(files map[string]string) []string {
	var out []string
	if _, ok := files["/etc/rancher/k3s/config.yaml"]; ok {
		out = append(out, "/etc/rancher/k3s/config.yaml")
	}
	var drop []string
	for p := range files {
		if filepath.Dir(p) == "/etc/rancher/k3s/config.yaml.d" && strings.HasSuffix(p, ".yaml") {
			drop = append(drop, p)
		}
	}
	sort.Strings(drop)
	return append(out, drop...)
}

// parseK3sSnapshotConfig merges k3s' config files (contents in k3s' order) and applies k3s'
// defaults (name etcd-snapshot, schedule 0 */12 * * *, retention 5, region us-east-1).
func parseK3sSnapshotConfig(contents []string) (k3sSnapshotConfig, error) {
	c := k3sSnapshotConfig{}
	for _, content := range contents {
		if err := yaml.Unmarshal([]byte(content), &c); err != nil {
			return c, fmt.Errorf("k3s config: %w", err)
		}
	}
	if c.Name == "" {
		c.Name = "etcd-snapshot"
	}
	if c.Schedule == "" {
		c.Schedule = "0 */12 * * *"
	}
	if c.Retention == nil {
		five := 5
		c.Retention = &five
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return c, nil
}

// s3Client is the S3 client of k3s' etcd-s3 settings: HTTPS unless etcd-s3-insecure,
// path-style, the CA of etcd-s3-endpoint-ca (a path on the node, below root) or the host's
// roots, static credentials. Checksums only where S3 requires them (no aws-chunked bodies):
// what k3s' minio-go client sends.
func (c k3sSnapshotConfig) s3Client(root string) (*s3.Client, error) {
	if c.Endpoint == "" || c.Bucket == "" {
		return nil, errors.New("etcd-s3 needs etcd-s3-endpoint and etcd-s3-bucket")
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.EndpointCA != "" {
		pem, err := os.ReadFile(filepath.Join(root, c.EndpointCA))
		if err != nil {
			return nil, fmt.Errorf("reading etcd-s3-endpoint-ca: %w", err)
		}
		tlsCfg.RootCAs = x509.NewCertPool()
		if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd-s3-endpoint-ca %s holds no certificate", c.EndpointCA)
		}
	}
	scheme := "https://"
	if c.Insecure {
		scheme = "http://"
	}
	ak, sk := c.AccessKey, c.SecretKey
	return s3.New(s3.Options{
		Region:       c.Region,
		BaseEndpoint: aws.String(scheme + c.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: ak, SecretAccessKey: sk, Source: "k3s etcd-s3 config"}, nil
		}),
		HTTPClient:                 &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}},
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}), nil
}

// s3Key is the object key of a snapshot file: <folder>/<name>.
func (c k3sSnapshotConfig) s3Key(name string) string {
	if c.Folder == "" {
		return name
	}
	return strings.TrimSuffix(c.Folder, "/") + "/" + name
}

// k3sSave takes a k3s snapshot named <name>-<node>-<unix time> into the node's snapshot
// directory and, with etcd-s3, uploads it. It returns the object key ("" without etcd-s3). A
// failed upload leaves the local file, as in k3s, and is the run's error.
func k3sSave(ctx context.Context, root, node string, c k3sSnapshotConfig, a etcdAccess, name string) (string, error) {
	file := fmt.Sprintf("%s-%s-%d", name, node, time.Now().Round(time.Second).Unix())
	path := filepath.Join(root, k3sSnapshotDir, file)
	if err := saveEtcdSnapshot(ctx, a, path); err != nil {
		return "", err
	}
	if !c.S3 {
		return "", nil
	}
	cli, err := c.s3Client(root)
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	key := c.s3Key(file)
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cli.PutObject(uctx, &s3.PutObjectInput{Bucket: aws.String(c.Bucket), Key: aws.String(key), Body: f}); err != nil {
		return "", fmt.Errorf("uploading %s to s3://%s/%s: %w", file, c.Bucket, key, err)
	}
	return key, nil
}

// k3sPrune keeps the newest retention snapshots named <name>-<node>-*, locally and (etcd-s3)
// under <folder>/<name>-<node> in the bucket; names sort by their unix time suffix.
func k3sPrune(ctx context.Context, root, node string, c k3sSnapshotConfig, name string, retention int) error {
	prefix := name + "-" + node
	entries, err := os.ReadDir(filepath.Join(root, k3sSnapshotDir))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var local []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			local = append(local, e.Name())
		}
	}
	for _, old := range pruned(local, retention) {
		if err := os.Remove(filepath.Join(root, k3sSnapshotDir, old)); err != nil {
			return err
		}
	}
	if !c.S3 {
		return nil
	}
	cli, err := c.s3Client(root)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var keys []string
	p := s3.NewListObjectsV2Paginator(cli, &s3.ListObjectsV2Input{Bucket: aws.String(c.Bucket), Prefix: aws.String(c.s3Key(prefix))})
	for p.HasMorePages() {
		page, err := p.NextPage(pctx)
		if err != nil {
			return fmt.Errorf("listing s3://%s/%s: %w", c.Bucket, c.s3Key(prefix), err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	for _, key := range pruned(keys, retention) {
		if _, err := cli.DeleteObject(pctx, &s3.DeleteObjectInput{Bucket: aws.String(c.Bucket), Key: aws.String(key)}); err != nil {
			return fmt.Errorf("deleting s3://%s/%s: %w", c.Bucket, key, err)
		}
	}
	return nil
}

var unixSuffix = regexp.MustCompile(`-(\d+)(\.[a-z.]+)?$`)

// pruned returns the names beyond the newest keep, by their unix time suffix.
func pruned(names []string, keep int) []string {
	stamp := func(s string) int64 {
		m := unixSuffix.FindStringSubmatch(s)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	sorted := slices.Clone(names)
	sort.SliceStable(sorted, func(i, j int) bool { return stamp(sorted[i]) > stamp(sorted[j]) })
	if len(sorted) <= keep {
		return nil
	}
	return sorted[keep:]
}

// startSnapshots starts the node's scheduled snapshots and its on-demand request timer once it
// runs (once per node: they survive reboots), when its document asks for them: k3s servers with
// etcd-s3 or a snapshot schedule in their config files (k3s takes scheduled snapshots unless
// etcd-disable-snapshots; the simulation takes them only when the document writes
// render.K3sEtcdSnapshotConfigPath, so that clusters of other tests do not pay for them), k0s
// controllers whose network stage starts render.EtcdSnapshotTimer, and the request timer of
// either distribution (startSnapshotRequests).
func (n *Node) startSnapshots(ctx context.Context, p *plan) {
	if p.role != render.RoleControlPlane {
		return
	}
	n.snaps.mu.Lock()
	started := n.snaps.started
	n.snaps.started = true
	n.snaps.mu.Unlock()
	if started {
		return
	}
	n.startScheduledSnapshots(ctx, p)
	n.startSnapshotRequests(ctx, p)
}

// startScheduledSnapshots runs the distribution's schedule.
func (n *Node) startScheduledSnapshots(ctx context.Context, p *plan) {
	var next func(time.Time) time.Time
	var run func(context.Context)
	switch p.distribution {
	case render.K3s:
		if _, ok := p.files[render.K3sEtcdSnapshotConfigPath]; !ok {
			return
		}
		cfg, err := n.k3sConfig(p)
		if err != nil {
			n.recordSnapshot(SnapshotRun{Kind: SnapshotScheduled, Time: time.Now(), Err: err})
			return
		}
		if cfg.Disable {
			return
		}
		sched, err := cron.ParseStandard(cfg.Schedule)
		if err != nil {
			// k3s refuses to start with a schedule it cannot parse.
			n.recordSnapshot(SnapshotRun{Kind: SnapshotScheduled, Time: time.Now(), Err: fmt.Errorf("etcd-snapshot-schedule-cron %q: %w", cfg.Schedule, err)})
			return
		}
		next = sched.Next
		run = func(ctx context.Context) { n.k3sScheduledSnapshot(ctx, p, cfg) }
	case render.K0s:
		timer, ok := p.files[render.EtcdSnapshotTimerPath]
		if !ok || !p.startsUnit("network", render.EtcdSnapshotTimer) {
			return
		}
		cal, unit, err := parseTimer(render.EtcdSnapshotTimerPath, timer)
		if err != nil {
			n.recordSnapshot(SnapshotRun{Kind: SnapshotScheduled, Time: time.Now(), Err: fmt.Errorf("%s: %w", render.EtcdSnapshotTimerPath, err)})
			return
		}
		next = cal.Next
		run = func(ctx context.Context) { n.runUnit(ctx, p, unit, SnapshotScheduled) }
	default:
		return
	}
	n.onSchedule(ctx, next, run)
}

// startSnapshotRequests runs the on-demand request timer (render.EtcdSnapshotRequestTimer) on its
// OnCalendar schedule when the document's network stage starts it, on either distribution.
func (n *Node) startSnapshotRequests(ctx context.Context, p *plan) {
	timer, ok := p.files[render.EtcdSnapshotRequestTimerPath]
	if !ok || !p.startsUnit("network", render.EtcdSnapshotRequestTimer) {
		return
	}
	cal, unit, err := parseTimer(render.EtcdSnapshotRequestTimerPath, timer)
	if err != nil {
		n.recordSnapshot(SnapshotRun{Kind: SnapshotOnDemand, Time: time.Now(), Err: fmt.Errorf("%s: %w", render.EtcdSnapshotRequestTimerPath, err)})
		return
	}
	n.onSchedule(ctx, cal.Next, func(ctx context.Context) { n.runUnit(ctx, p, unit, SnapshotOnDemand) })
}

// onSchedule calls run at each time next gives, while the node runs and its member is up (a
// machine that is off or rebooting, or a member that is down, takes no snapshot at that time:
// systemd timers without Persistent=, k3s' cron; the next time counts), until ctx ends.
func (n *Node) onSchedule(ctx context.Context, next func(time.Time) time.Time, run func(context.Context)) {
	n.snaps.wg.Add(1)
	go func() {
		defer n.snaps.wg.Done()
		for {
			at := next(time.Now())
			if at.IsZero() {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			if n.Status().Phase != PhaseRunning {
				continue
			}
			if e := n.etcdServer(); e == nil || !e.running() {
				continue
			}
			run(ctx)
		}
	}()
}

// k3sConfig reads k3s' config files as the node wrote them.
func (n *Node) k3sConfig(p *plan) (k3sSnapshotConfig, error) {
	var contents []string
	for _, f := range k3sConfigFiles(p.files) {
		contents = append(contents, p.files[f])
	}
	return parseK3sSnapshotConfig(contents)
}

// k3sScheduledSnapshot is one of k3s' scheduled snapshots: save, then retention.
func (n *Node) k3sScheduledSnapshot(ctx context.Context, p *plan, cfg k3sSnapshotConfig) {
	r := SnapshotRun{Kind: SnapshotScheduled, Time: time.Now()}
	a, err := n.snapshotAccess(p)
	if err == nil {
		r.Key, err = k3sSave(ctx, n.root, n.Name(), cfg, a, cfg.Name)
	}
	if err == nil {
		err = k3sPrune(ctx, n.root, n.Name(), cfg, cfg.Name, *cfg.Retention)
	}
	r.Err = err
	n.recordSnapshot(r)
}

// snapshotAccess writes what the node's own etcd tools use (the distribution's etcd client
// certificate, issued by the member's etcd CA; the CA unless the document wrote it) and the
// node's commands (nodeCommands), and returns the access.
func (n *Node) snapshotAccess(p *plan) (etcdAccess, error) {
	n.snaps.access.Lock()
	defer n.snaps.access.Unlock()
	e := n.etcdServer()
	if e == nil {
		return etcdAccess{}, errNoEtcd
	}
	a := etcdAccessFor(p.distribution, n.root, e.local)
	if _, err := os.Stat(a.certFile); err != nil {
		crt, key, err := issue(e.ca, "kube-apiserver-etcd-client", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
		if err != nil {
			return a, fmt.Errorf("issuing the etcd client certificate: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(a.certFile), 0o700); err != nil {
			return a, err
		}
		if err := os.WriteFile(a.keyFile, key, 0o600); err != nil {
			return a, err
		}
		if err := os.WriteFile(a.certFile, crt, 0o644); err != nil {
			return a, err
		}
	}
	if _, err := os.Stat(a.caCrt); err != nil {
		if err := os.MkdirAll(filepath.Dir(a.caCrt), 0o700); err != nil {
			return a, err
		}
		if err := os.WriteFile(a.caCrt, e.ca.Cert, 0o644); err != nil {
			return a, err
		}
	}
	return a, n.nodeCommands(p, e)
}

// nodeCommands writes the node's own programs into its /usr/local/bin: hostname (the node
// name), and the distribution's command (k0s or k3s), which runs this test binary as that
// command (snapshothelper.go) for the node's root and member.
func (n *Node) nodeCommands(p *plan, e *etcdServer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the test binary: %w", err)
	}
	bin := filepath.Join(n.root, nodeBinDir)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	name := n.Name()
	dist := string(p.distribution)
	scripts := map[string]string{
		"hostname": "#!/bin/sh\necho " + shellQuote(name) + "\n",
		dist: "#!/bin/sh\n# The " + dist + " command of simulated node " + name + " (test/simnode snapshothelper.go).\n" +
			helperEnv + "=" + dist + " " + helperRootEnv + "=" + shellQuote(n.root) + " " + helperEtcdEnv + "=" + shellQuote(e.local) +
			" " + helperDataEnv + "=" + shellQuote(filepath.Join(e.dir, "data")) + " " + helperPeerEnv + "=" + shellQuote(e.peerURL()) +
			" " + helperNameEnv + "=" + shellQuote(e.name) +
			" NODE_NAME=" + shellQuote(name) + " exec " + shellQuote(exe) + " \"$@\"\n",
	}
	for file, content := range scripts {
		// Unchanged commands are left alone, and changed ones replaced whole (rename): another
		// unit of the node may be running one of them right now.
		path := filepath.Join(bin, file)
		if old, err := os.ReadFile(path); err == nil && string(old) == content {
			continue
		}
		if err := os.WriteFile(path+".new", []byte(content), 0o755); err != nil {
			return err
		}
		if err := os.Rename(path+".new", path); err != nil {
			return err
		}
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// nodePathPattern finds absolute paths of the node's own trees in a command line or script:
// at the start, or after a blank, a quote, '=' or ':' (PATH lists).
var nodePathPattern = regexp.MustCompile(`(^|[\s'"=:])(/(?:etc|var|run|usr/local)/)`)

// nodePaths maps the node's absolute paths below its root (see the package comment above).
func (n *Node) nodePaths(s string) string {
	return nodePathPattern.ReplaceAllString(s, "${1}"+n.root+"${2}")
}

// runScriptCommand runs one command of the document (a unit's ExecStart, a stage command, a
// step's `if`) with the host's /bin/sh, through mapped.
func (n *Node) runScriptCommand(ctx context.Context, p *plan, command string) (string, error) {
	if n.etcdServer() != nil {
		// A control-plane node's own etcd tools and credentials.
		if _, err := n.snapshotAccess(p); err != nil {
			return "", err
		}
	}
	line, err := n.mapped(p, command, 0)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "/bin/sh", "-c", line)
	cmd.Dir = n.root
	cmd.Env = []string{n.nodePaths("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), "LANG=C.UTF-8"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		return text, fmt.Errorf("%s: %w: %s", command, err, lastLines(text, 5))
	}
	return text, nil
}

// mapped is text (a command line, a script, a configuration file) with the node's paths mapped
// below its root (nodePaths). A file of the document that text names and that itself names node
// paths (the snapshot script, curl's config with its cacert) is read through the same mapping:
// its mapped copy is written beside it (suffix .sim) and text names the copy. The files the
// document wrote stay as the node received them.
func (n *Node) mapped(p *plan, text string, depth int) (string, error) {
	out := n.nodePaths(text)
	if depth > 2 {
		return out, nil
	}
	for f, content := range p.files {
		if !strings.Contains(text, f) || !nodePathPattern.MatchString(content) {
			continue
		}
		inner, err := n.mapped(p, content, depth+1)
		if err != nil {
			return "", err
		}
		cp := n.hostPath(f) + ".sim"
		if err := os.WriteFile(cp, []byte(inner), 0o700); err != nil {
			return "", fmt.Errorf("mapping %s: %w", f, err)
		}
		out = strings.ReplaceAll(out, n.hostPath(f), cp)
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runUnit runs a oneshot service of the document as systemd does when its timer elapses: its
// ExecStart lines, in order, until one fails. The run is recorded as a snapshot of kind, except
// an on-demand request check that found nothing to do (it printed nothing and succeeded).
func (n *Node) runUnit(ctx context.Context, p *plan, unit, kind string) {
	r := SnapshotRun{Kind: kind, Time: time.Now()}
	content, ok := p.files["/etc/systemd/system/"+unit]
	if !ok {
		r.Err = fmt.Errorf("the timer starts %s, which the document does not write", unit)
		n.recordSnapshot(r)
		return
	}
	var outs []string
	for _, line := range strings.Split(content, "\n") {
		exec, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart=")
		if !ok {
			continue
		}
		out, err := n.runScriptCommand(ctx, p, exec)
		outs = append(outs, out)
		if err != nil {
			r.Err = fmt.Errorf("%s failed: %w", unit, err)
			break
		}
	}
	r.Output = strings.TrimSpace(strings.Join(outs, "\n"))
	if kind == SnapshotOnDemand && r.Err == nil && r.Output == "" {
		return
	}
	n.recordSnapshot(r)
}

// startsUnit tells whether a stage of the document starts a unit (systemctl start ... unit).
func (p *plan) startsUnit(stage, unit string) bool {
	for _, c := range p.stageCommands[stage] {
		if strings.Contains(c, "systemctl start") && slices.Contains(strings.Fields(c), unit) {
			return true
		}
	}
	return false
}

// runStage runs a stage of the document as yip does under kairos-agent: each step whose `if`
// holds (a shell test, run by sh) runs its commands in order, a failing command ends its step,
// the other steps still run; the stage's error joins the steps' errors. Only commands run:
// the stages the simulation runs this way (before-upgrade) carry nothing else in kairos-capi's
// documents.
func (n *Node) runStage(ctx context.Context, p *plan, stage string) error {
	var errs []error
	for _, st := range p.stages[stage] {
		if st.If != "" {
			if _, err := n.runScriptCommand(ctx, p, st.If); err != nil {
				continue // the condition does not hold: yip skips the step
			}
		}
		for _, c := range st.Commands {
			out, err := n.runScriptCommand(ctx, p, c)
			if strings.Contains(c, render.EtcdSnapshotScript) {
				n.recordSnapshot(SnapshotRun{Kind: SnapshotBeforeUpgrade, Time: time.Now(), Output: out, Err: err})
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s step %q: %w", stage, st.Name, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}
