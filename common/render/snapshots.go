package render

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// EtcdSnapshots makes a control-plane node snapshot its etcd member to an S3-compatible store
// (docs/backups.md): k3s through its own scheduled snapshots and S3 upload, k0s through a
// systemd timer that runs `k0s backup` and uploads the archive with curl; both take a snapshot
// in Kairos' before-upgrade stage.
type EtcdSnapshots struct {
	// Schedule is a five-field cron expression (syntax.ParseCron).
	Schedule string
	// Retention is how many snapshots of each kind a node keeps, locally and in the store.
	Retention int32
	// Endpoint is the store's host[:port]; requests are HTTPS, path-style.
	Endpoint string
	Bucket   string
	// Folder is the key prefix of this cluster's snapshots, <prefix>/<namespace>/<cluster>:
	// segments of letters, digits, '.', '_' and '-', separated by single '/'.
	Folder string
	Region string
	// CABundle is PEM; empty trusts the node's system roots.
	CABundle string
	// AccessKeyID and SecretAccessKey sign the requests (AWS Signature Version 4). They reach
	// only root-only files of the document.
	AccessKeyID, SecretAccessKey string
	// Restore makes the node that creates the cluster (Node.Init) start it from the newest
	// snapshot of the cluster in the store that restores, before the distribution first starts
	// (EtcdRestoreScript).
	Restore bool
}

// Paths and units of the etcd snapshots.
const (
	// EtcdSnapshotScript takes a snapshot: "save scheduled|pre-upgrade|on-demand".
	EtcdSnapshotScript = ScriptDir + "/etcd-snapshot.sh"
	// EtcdSnapshotConfigDir holds the k0s upload's curl configuration (credentials) and CA.
	EtcdSnapshotConfigDir  = "/etc/kairos-capi/etcd-snapshots"
	EtcdSnapshotCurlConfig = EtcdSnapshotConfigDir + "/curl.conf"
	EtcdSnapshotCA         = EtcdSnapshotConfigDir + "/ca.crt"
	// EtcdSnapshotDir keeps the k0s archives on the node (persistent on Kairos, like /var/lib/k0s).
	EtcdSnapshotDir = "/var/lib/kairos-capi/etcd-snapshots"
	// EtcdSnapshotUnit and EtcdSnapshotTimer take the scheduled k0s snapshots.
	EtcdSnapshotUnit      = "kairos-capi-etcd-snapshot.service"
	EtcdSnapshotTimer     = "kairos-capi-etcd-snapshot.timer"
	EtcdSnapshotUnitPath  = "/etc/systemd/system/" + EtcdSnapshotUnit
	EtcdSnapshotTimerPath = "/etc/systemd/system/" + EtcdSnapshotTimer
	// EtcdSnapshotRequestScript takes an on-demand snapshot when the control plane asked for one
	// (EtcdSnapshotRequestConfigMap holds a value this node has not handled yet), run every
	// minute by EtcdSnapshotRequestTimer; EtcdSnapshotRequestHandled records the value handled.
	EtcdSnapshotRequestScript       = ScriptDir + "/etcd-snapshot-request.sh"
	EtcdSnapshotRequestUnit         = "kairos-capi-etcd-snapshot-request.service"
	EtcdSnapshotRequestTimer        = "kairos-capi-etcd-snapshot-request.timer"
	EtcdSnapshotRequestUnitPath     = "/etc/systemd/system/" + EtcdSnapshotRequestUnit
	EtcdSnapshotRequestTimerPath    = "/etc/systemd/system/" + EtcdSnapshotRequestTimer
	EtcdSnapshotRequestHandled      = EtcdSnapshotDir + "/request-handled"
	EtcdSnapshotRequestConfigMap    = "kairos-capi-etcd-snapshot-request"
	EtcdSnapshotRequestConfigMapKey = "request"
	// EtcdSnapshotRequestedAtKey is when the control plane handed the request over (Unix seconds).
	EtcdSnapshotRequestedAtKey = "requested"
	// K3sEtcdSnapshotConfigPath holds k3s' snapshot and S3 settings (credentials included),
	// before the user's K3sUserConfigPath, which may not set them.
	K3sEtcdSnapshotConfigPath = "/etc/rancher/k3s/config.yaml.d/50-kairos-capi-etcd-snapshots.yaml"
	K3sEtcdS3CAPath           = "/etc/rancher/k3s/etcd-s3-ca.crt"
	// EtcdRestoreScript restores the newest good snapshot, once, as ExecStartPre of the
	// distribution's unit (after the preflight); EtcdRestoreMarker records which one it restored.
	EtcdRestoreScript = ScriptDir + "/etcd-restore.sh"
	EtcdRestoreMarker = EtcdSnapshotDir + "/restored"
	EtcdRestoreDropIn = "20-kairos-capi-etcd-restore.conf"

	// emptySHA256 is the SHA-256 of an empty body, the x-amz-content-sha256 of GET and DELETE.
	emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	// minCurl is the first curl release with --aws-sigv4 (curl 7.75.0, 2021-02-03).
	minCurlMajor, minCurlMinor = 7, 75
)

const stepSnapshotTimer = "kairos-capi etcd snapshot timer"
const stepSnapshotPreUpgrade = "kairos-capi etcd snapshot before upgrade"

var (
	s3BucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	s3FolderPattern = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	s3RegionPattern = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// validateEtcdSnapshots checks EtcdSnapshots. Every value that reaches a script is restricted
// to characters that need no quoting beyond single quotes; the credentials, which cannot be,
// go only into files (k3s YAML, curl's config), never into a command line.
func (n *Node) validateEtcdSnapshots(p *problems) {
	s := n.EtcdSnapshots
	if s == nil {
		return
	}
	if n.Role != RoleControlPlane {
		p.add("EtcdSnapshots", "only control-plane nodes run etcd")
		return
	}
	if _, err := syntax.ParseCron(s.Schedule); err != nil {
		p.add("EtcdSnapshots.Schedule", "%q %v", s.Schedule, err)
	}
	if s.Retention < 1 || s.Retention > 1000 {
		p.add("EtcdSnapshots.Retention", "%d is not between 1 and 1000", s.Retention)
	}
	if !isHostPort(s.Endpoint) {
		p.add("EtcdSnapshots.Endpoint", "%q is not host[:port] (a DNS name or an IP address, without a scheme or a path)", s.Endpoint)
	}
	if len(s.Bucket) < 3 || len(s.Bucket) > 63 || !s3BucketPattern.MatchString(s.Bucket) {
		p.add("EtcdSnapshots.Bucket", "%q is not an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens)", s.Bucket)
	}
	if !s3FolderPattern.MatchString(s.Folder) {
		p.add("EtcdSnapshots.Folder", "%q is not a folder of letters, digits, '.', '_' and '-' separated by single '/'", s.Folder)
	}
	if !s3RegionPattern.MatchString(s.Region) {
		p.add("EtcdSnapshots.Region", "%q is not a region name such as eu-west-1", s.Region)
	}
	if s.Restore && !n.Init {
		p.add("EtcdSnapshots.Restore", "only the node that creates the cluster restores a snapshot; the others join it")
	}
	if s.CABundle != "" {
		if msg := checkCABundle(s.CABundle); msg != "" {
			p.add("EtcdSnapshots.CABundle", "%s", msg)
		}
	}
	// Values are never quoted in these messages: they are secrets.
	switch {
	case s.AccessKeyID == "" || s.SecretAccessKey == "":
		p.add("EtcdSnapshots", "the access key ID and the secret access key are both required")
	case strings.ContainsAny(s.AccessKeyID, ":\r\n\x00") || strings.ContainsAny(s.SecretAccessKey, "\r\n\x00"):
		p.add("EtcdSnapshots", "the access key ID holds a ':' or a line break, or the secret access key a line break: check the credentials Secret (no trailing newline)")
	}
}

// isHostPort reports whether s is a DNS name or an IP address, with an optional port.
func isHostPort(s string) bool {
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return false
		}
		host = h
	}
	return net.ParseIP(host) != nil || isDNSName(strings.ToLower(host))
}

// checkCABundle says why a CA bundle is not PEM certificates, or "".
func checkCABundle(bundle string) string {
	rest := []byte(bundle)
	found := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return "holds a PEM block of type " + block.Type + ": only CERTIFICATE blocks belong in a CA bundle"
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "certificate " + strconv.Itoa(found+1) + " cannot be parsed: " + err.Error()
		}
		found++
	}
	if found == 0 || strings.TrimSpace(string(rest)) != "" {
		return "is not a list of PEM certificates"
	}
	return ""
}

// etcdSnapshots adds what the node needs to take snapshots, for its distribution.
func (b *builder) etcdSnapshots() {
	s := b.n.EtcdSnapshots
	if s == nil {
		return
	}
	b.file(EtcdSnapshotScript, 0o700, b.etcdSnapshotScript())
	if b.n.Distribution == K0s || s.Restore {
		b.curlFiles()
	}
	if s.Restore {
		b.etcdRestore()
	}
	b.file(EtcdSnapshotRequestScript, 0o700, b.etcdSnapshotRequestScript())
	b.file(EtcdSnapshotRequestUnitPath, 0o644, "# Generated by kairos-capi: an on-demand etcd snapshot when the control plane asked for one (docs/backups.md).\n"+
		"[Unit]\nDescription=kairos-capi on-demand etcd snapshot request\n\n"+
		"[Service]\nType=oneshot\nExecStart=/bin/sh "+EtcdSnapshotRequestScript+"\n")
	b.file(EtcdSnapshotRequestTimerPath, 0o644, "# Generated by kairos-capi: reads the control plane's on-demand snapshot request every minute.\n"+
		"[Unit]\nDescription=kairos-capi on-demand etcd snapshot requests\n\n"+
		"[Timer]\nOnCalendar=*-*-* *:*:00\nUnit="+EtcdSnapshotRequestUnit+"\n")
	if b.n.Distribution == K3s {
		b.file(K3sEtcdSnapshotConfigPath, 0o600, b.k3sEtcdSnapshotConfig())
		if s.CABundle != "" {
			b.file(K3sEtcdS3CAPath, 0o644, s.CABundle)
		}
		return
	}
	cron, _ := syntax.ParseCron(s.Schedule) // validated
	b.file(EtcdSnapshotUnitPath, 0o644, "# Generated by kairos-capi: a scheduled etcd snapshot of this k0s controller, uploaded to S3 (docs/backups.md).\n"+
		"[Unit]\nDescription=kairos-capi scheduled etcd snapshot\nAfter=k0scontroller.service\n\n"+
		"[Service]\nType=oneshot\nExecStart=/bin/sh "+EtcdSnapshotScript+" save scheduled\n")
	b.file(EtcdSnapshotTimerPath, 0o644, "# Generated by kairos-capi from the cron schedule \""+cron.String()+"\" (node time zone, as k3s' own schedule).\n"+
		"[Unit]\nDescription=kairos-capi scheduled etcd snapshots\n\n"+
		"[Timer]\nOnCalendar="+cron.OnCalendar()+"\nUnit="+EtcdSnapshotUnit+"\n")
}

// curlFiles writes curl's configuration (credentials) and the store's CA, for the k0s uploads
// and for listing the bucket before a restore.
func (b *builder) curlFiles() {
	b.dir(EtcdSnapshotConfigDir, 0o700)
	b.file(EtcdSnapshotCurlConfig, 0o600, b.curlConfig())
	if s := b.n.EtcdSnapshots; s.CABundle != "" {
		b.file(EtcdSnapshotCA, 0o644, s.CABundle)
	}
}

// k3sEtcdSnapshotConfig is a k3s config file whose keys are k3s' flags
// (docs.k3s.io/cli/etcd-snapshot, "S3 Compatible Object Store Support" and the scheduled
// snapshot options). Scheduled snapshots are named <cluster>-<node>-<unix time>.
func (b *builder) k3sEtcdSnapshotConfig() string {
	s := b.n.EtcdSnapshots
	m := map[string]any{
		"etcd-snapshot-schedule-cron": s.Schedule,
		"etcd-snapshot-retention":     int(s.Retention),
		"etcd-snapshot-name":          b.n.ClusterName,
		"etcd-s3":                     true,
		"etcd-s3-endpoint":            s.Endpoint,
		"etcd-s3-bucket":              s.Bucket,
		"etcd-s3-folder":              s.Folder,
		"etcd-s3-region":              s.Region,
		"etcd-s3-access-key":          s.AccessKeyID,
		"etcd-s3-secret-key":          s.SecretAccessKey,
	}
	if s.CABundle != "" {
		m["etcd-s3-endpoint-ca"] = K3sEtcdS3CAPath
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		panic(err) // a map of strings, numbers and booleans
	}
	return "# Generated by kairos-capi: etcd snapshots to S3 (docs/backups.md). Holds the S3 credentials.\n" + string(out)
}

// curlConfig is the k0s upload's curl configuration: the credentials stay out of every
// process' arguments (curl --config; "user" and "aws-sigv4" are curl's long options).
func (b *builder) curlConfig() string {
	s := b.n.EtcdSnapshots
	q := func(v string) string {
		return `"` + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `"`, `\"`) + `"`
	}
	// A store that accepts connections but never answers must fail the upload or the restore,
	// not hang it: curl gives up connecting after 15 s, and a transfer that moves less than a
	// byte a second for a minute (never a deadline on the whole transfer: a large snapshot on a
	// slow site link takes as long as it takes).
	c := "# Generated by kairos-capi: the S3 credentials of the etcd snapshots, read by curl --config.\n" +
		"user = " + q(s.AccessKeyID+":"+s.SecretAccessKey) + "\n" +
		"aws-sigv4 = " + q("aws:amz:"+s.Region+":s3") + "\n" +
		"connect-timeout = 15\nspeed-limit = 1\nspeed-time = 60\n"
	if s.CABundle != "" {
		c += "cacert = " + q(EtcdSnapshotCA) + "\n"
	}
	return c
}

// etcdSnapshotScript is `etcd-snapshot.sh save <kind>`. Names (docs/backups.md): scheduled
// <cluster>-<node>-<unix time>, the other kinds <kind>-<cluster>-<node>-<unix time> (k0s adds
// .tar.gz), so that a kind's retention never counts another kind's snapshots.
func (b *builder) etcdSnapshotScript() string {
	n := b.n
	s := n.EtcdSnapshots
	var w strings.Builder
	w.Grow(4096)
	w.WriteString(b.header("Takes a snapshot of this node's etcd member and uploads it to s3://" + s.Bucket + "/" + s.Folder + "/ (docs/backups.md)."))
	w.WriteString("set -eu\numask 077\n")
	w.WriteString("usage() { echo \"usage: $0 save scheduled|pre-upgrade|on-demand\" >&2; exit 2; }\n")
	w.WriteString("[ \"$#\" -eq 2 ] && [ \"$1\" = save ] || usage\n")
	w.WriteString("kind=$2\ncluster='" + n.ClusterName + "'\nretention=" + strconv.Itoa(int(s.Retention)) + "\n")
	w.WriteString("case \"$kind\" in\n  scheduled) name=$cluster ;;\n  pre-upgrade|on-demand) name=$kind-$cluster ;;\n  *) usage ;;\nesac\n")
	w.WriteString("fail() { echo \"kairos-capi: $kind etcd snapshot: $*\" >&2; exit 1; }\n")
	if n.Distribution == K3s {
		// k3s reads its S3 settings from K3sEtcdSnapshotConfigPath for etcd-snapshot too ("These
		// flags are valid for both k3s server and k3s etcd-snapshot", docs.k3s.io), uploads the
		// snapshot <name>-<node>-<unix time> and, with prune, keeps the newest of that name.
		w.WriteString("k3s etcd-snapshot save --name \"$name\" || fail \"k3s etcd-snapshot save failed\"\n")
		w.WriteString("k3s etcd-snapshot prune --name \"$name\" --snapshot-retention \"$retention\" || fail \"k3s etcd-snapshot prune failed\"\n")
		w.WriteString("echo \"kairos-capi: $kind etcd snapshot $name saved to s3://" + s.Bucket + "/" + s.Folder + "/\"\n")
		return w.String()
	}
	w.WriteString("url='https://" + s.Endpoint + "/" + s.Bucket + "'\nfolder='" + s.Folder + "'\n")
	w.WriteString("dir=" + EtcdSnapshotDir + "\nconf=" + EtcdSnapshotCurlConfig + "\nempty=" + emptySHA256 + "\n")
	w.WriteString("node=$(hostname)\nbase=$name-$node\n")
	fmtVersion := strconv.Itoa(minCurlMajor) + "." + strconv.Itoa(minCurlMinor)
	w.WriteString("# curl signs with AWS Signature Version 4 since " + fmtVersion + " (--aws-sigv4).\n")
	w.WriteString("v=$(curl --version 2>/dev/null | sed -n '1s/^curl \\([0-9]*\\)\\.\\([0-9]*\\).*$/\\1 \\2/p')\n")
	w.WriteString("major=${v% *}; minor=${v#* }\n")
	w.WriteString("if [ -z \"$v\" ] || [ \"$major\" -lt " + strconv.Itoa(minCurlMajor) + " ] || { [ \"$major\" -eq " + strconv.Itoa(minCurlMajor) + " ] && [ \"$minor\" -lt " + strconv.Itoa(minCurlMinor) + " ]; }; then\n")
	w.WriteString("  fail \"curl ${v:-(none)} cannot sign S3 requests: the image must ship curl " + fmtVersion + " or newer\"\nfi\n")
	w.WriteString("s3() { curl --config \"$conf\" --fail --silent --show-error \"$@\"; }\n")
	w.WriteString("mkdir -p \"$dir\"\ntmp=$(mktemp -d \"$dir/.backup.XXXXXX\")\ntrap 'rm -rf \"$tmp\"' EXIT\n")
	// k0s backup writes k0s_backup_<timestamp>.tar.gz into --save-path (docs.k0sproject.io, backup).
	w.WriteString("k0s backup --save-path=\"$tmp\" || fail \"k0s backup failed\"\n")
	w.WriteString("archive=\nfor f in \"$tmp\"/*.tar.gz; do [ -f \"$f\" ] && archive=$f; done\n")
	w.WriteString("[ -n \"$archive\" ] || fail \"k0s backup wrote no archive\"\n")
	w.WriteString("file=$base-$(date -u +%s).tar.gz\nmv \"$archive\" \"$dir/$file\"\n")
	w.WriteString("hash=$(sha256sum \"$dir/$file\" | cut -d ' ' -f 1)\n")
	w.WriteString("s3 -H \"x-amz-content-sha256: $hash\" -T \"$dir/$file\" \"$url/$folder/$file\" || fail \"uploading $file to s3://" + s.Bucket + "/$folder/ failed\"\n")
	w.WriteString("echo \"kairos-capi: $kind etcd snapshot uploaded to s3://" + s.Bucket + "/$folder/$file\"\n")
	w.WriteString("# Retention: the newest $retention of this node and kind, here and in the bucket.\n")
	w.WriteString("re=\"$(printf '%s' \"$base\" | sed 's/\\./\\\\./g')-[0-9]+\\.tar\\.gz\\$\"\n")
	w.WriteString("ls -1 \"$dir\" | grep -E \"^$re\" | sort -r | awk -v keep=\"$retention\" 'NR > keep' | while read -r f; do rm -f \"$dir/$f\"; done\n")
	w.WriteString("prefix=$(printf '%s' \"$folder/$base-\" | sed 's,/,%2F,g')\n")
	w.WriteString("listing=$(s3 -H \"x-amz-content-sha256: $empty\" \"$url?list-type=2&prefix=$prefix\") || fail \"listing s3://" + s.Bucket + "/$folder/ failed\"\n")
	w.WriteString("for key in $(printf '%s' \"$listing\" | tr '<' '\\n' | sed -n 's/^Key>//p' | grep -E \"/$re\" | sort -r | awk -v keep=\"$retention\" 'NR > keep'); do\n")
	w.WriteString("  s3 -X DELETE -H \"x-amz-content-sha256: $empty\" \"$url/$key\" || fail \"deleting s3://" + s.Bucket + "/$key failed\"\ndone\n")
	return w.String()
}

// etcdSnapshotRequestScript reads EtcdSnapshotRequestConfigMap with the distribution's kubectl
// and the node's admin kubeconfig (k0s controllers have no kubelet; nodes never call the
// management cluster, which writes the request into the workload cluster) and takes one
// on-demand snapshot per value it has not handled. A ConfigMap that is not there is no request;
// an API server that does not answer fails the unit, and the next minute tries again. A request
// made before the node first bootstrapped (BootstrapDoneMarker's time: written once, kept across
// reboots and in-place upgrades; the management cluster's and the node's clocks, seconds apart
// at most on synchronized machines) is recorded as handled without a snapshot: it is not for a
// node that joined later, nor for one that restored a snapshot holding the request. A request
// not handled before a reboot is taken after it. The value is only compared and stored, never
// run (the webhook also restricts its characters).
func (b *builder) etcdSnapshotRequestScript() string {
	kubectl := string(b.n.Distribution) + " kubectl"
	return b.header("Takes an on-demand etcd snapshot when kube-system/"+EtcdSnapshotRequestConfigMap+" holds a request this node has not handled (docs/backups.md).") +
		"set -eu\numask 077\n" +
		"state=" + EtcdSnapshotRequestHandled + "\n" +
		"got=$(" + kubectl + " get configmap -n kube-system " + EtcdSnapshotRequestConfigMap + " --ignore-not-found -o 'jsonpath={.data." + EtcdSnapshotRequestedAtKey + "}/{.data." + EtcdSnapshotRequestConfigMapKey + "}') ||\n" +
		"  { echo \"kairos-capi: reading the on-demand etcd snapshot request (kube-system/" + EtcdSnapshotRequestConfigMap + ") failed\" >&2; exit 1; }\n" +
		"requested=${got%%/*}\nreq=${got#*/}\n" +
		"[ -n \"$req\" ] || exit 0\n" +
		"if [ -e \"$state\" ] && [ \"$(cat \"$state\")\" = \"$req\" ]; then exit 0; fi\n" +
		"mkdir -p " + EtcdSnapshotDir + "\n" +
		"case \"$requested\" in ''|*[!0-9]*) requested=0 ;; esac\n" +
		"bootstrapped=$(stat -c %Y " + BootstrapDoneMarker + " 2>/dev/null || echo 0)\n" +
		"if [ \"$requested\" -lt \"$bootstrapped\" ]; then\n" +
		"  echo \"kairos-capi: the on-demand etcd snapshot request ($req) is from before this node bootstrapped: not taken\"\n" +
		"  printf '%s' \"$req\" > \"$state\"\n  exit 0\nfi\n" +
		"echo \"kairos-capi: on-demand etcd snapshot requested ($req)\"\n" +
		"/bin/sh " + EtcdSnapshotScript + " save on-demand\n" +
		"printf '%s' \"$req\" > \"$state\"\n"
}

// etcdSnapshotSteps returns the network stage step that starts the timers (k0s' schedule, and
// the on-demand request's on both distributions) and the before-upgrade step. The timers start
// on every boot of an installed system (Kairos writes the units from the document each boot). The before-upgrade snapshot runs only once the node has
// bootstrapped: the first boot's image upgrade (imageScript) happens before etcd exists.
func (b *builder) etcdSnapshotSteps() (network []cloudconfig.Step, beforeUpgrade []cloudconfig.Step) {
	if b.n.EtcdSnapshots == nil {
		return nil, nil
	}
	timers := EtcdSnapshotRequestTimer
	if b.n.Distribution == K0s {
		timers = EtcdSnapshotTimer + " " + timers
	}
	network = append(network, cloudconfig.Step{
		Name:     stepSnapshotTimer,
		If:       notInstallerOrRecovery,
		Commands: []string{"systemctl daemon-reload", "systemctl start --no-block " + timers},
	})
	beforeUpgrade = append(beforeUpgrade, cloudconfig.Step{
		Name:     stepSnapshotPreUpgrade,
		If:       notInstallerOrRecovery + " && [ -e " + BootstrapDoneMarker + " ]",
		Commands: []string{"/bin/sh " + EtcdSnapshotScript + " save pre-upgrade"},
	})
	return network, beforeUpgrade
}

// etcdRestore makes the distribution's unit restore a snapshot before it first starts: a
// drop-in after the preflight's, so that a node with the wrong version restores nothing.
// systemd runs ExecStartPre lines in the order of the drop-ins' names; a failing one fails the
// start, and the unit's restart policy tries again, so a store that is unreachable for a while
// only delays the node.
func (b *builder) etcdRestore() {
	b.file(EtcdRestoreScript, 0o700, b.etcdRestoreScript())
	b.file(EtcdRestoreReportScript, 0o700, b.restoreReportScript())
	b.file("/etc/systemd/system/"+b.service+".service.d/"+EtcdRestoreDropIn, 0o644,
		"# Generated by kairos-capi: "+b.service+" first restores the newest good etcd snapshot of the cluster (docs/backups.md).\n"+
			"[Service]\n"+
			// Downloading and restoring a large snapshot may take longer than systemd's default
			// start timeout (90 s), which would kill the restore and start it again forever;
			// k3s' own unit has no start timeout either (TimeoutStartSec=0).
			"TimeoutStartSec=infinity\n"+
			"ExecStartPre=/bin/sh "+EtcdRestoreScript+"\n")
}

// shellQuote quotes a word for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// etcdRestoreScript lists the cluster's snapshots in the bucket (ListObjectsV2, with curl as
// the k0s uploads), newest first by the unix time that ends every name (docs/backups.md,
// "Naming"), and restores the first that restores:
//
//   - k3s: `k3s server --cluster-reset --cluster-reset-restore-path=<name>` with the node's own
//     arguments; k3s fetches the snapshot from the bucket of its config file and restores it
//     ("Restoring a Snapshot to New Hosts", docs.k3s.io/cli/etcd-snapshot: the restore path is
//     the snapshot's file name when the S3 flags are set). The server token is the cluster's own
//     (kept by the management cluster), which is what decrypts the bootstrap data that k3s
//     keeps in etcd; a snapshot of another cluster does not decrypt, and k3s refuses it.
//   - k0s: download the archive and `k0s restore` it (docs.k0sproject.io, backup: before the
//     controller starts; it refuses a data directory that overlaps the archive, so the PKI the
//     document wrote moves aside while it runs). The archive's CA must be the cluster's CA,
//     which the document holds: an archive of another cluster is refused.
//
// A failed attempt is cleaned up before the next. Once one restores, EtcdRestoreMarker records
// its name, so later starts (and reboots) keep the restored data.
func (b *builder) etcdRestoreScript() string {
	n := b.n
	s := n.EtcdSnapshots
	ext := ""
	if n.Distribution == K0s {
		ext = `\.tar\.gz`
	}
	var w strings.Builder
	w.Grow(4096)
	w.WriteString(b.header("Restores the newest good etcd snapshot of the cluster from s3://" + s.Bucket + "/" + s.Folder + "/ before " + b.service + " first starts (docs/backups.md)."))
	w.WriteString("set -eu\numask 077\n")
	w.WriteString("marker=" + EtcdRestoreMarker + "\n[ ! -e \"$marker\" ] || exit 0\n")
	w.WriteString("fail() { echo \"kairos-capi: etcd restore: $*\" >&2; exit 1; }\n")
	w.WriteString("cluster='" + n.ClusterName + "'\nurl='https://" + s.Endpoint + "/" + s.Bucket + "'\nfolder='" + s.Folder + "'\n")
	w.WriteString("conf=" + EtcdSnapshotCurlConfig + "\nempty=" + emptySHA256 + "\n")
	w.WriteString("s3() { curl --config \"$conf\" --fail --silent --show-error \"$@\"; }\n")
	// Scheduled snapshots are <cluster>-<node>-<unix>, the others <kind>-<cluster>-<node>-<unix>.
	w.WriteString("esc() { printf '%s' \"$1\" | sed 's/\\./\\\\./g'; }\n")
	w.WriteString("re=\"^$(esc \"$folder\")/((pre-upgrade|on-demand)-)?$(esc \"$cluster\")-[^/]+-[0-9]+" + ext + "\\$\"\n")
	w.WriteString("prefix=$(printf '%s' \"$folder/\" | sed 's,/,%2F,g')\n")
	w.WriteString("listing=$(s3 -H \"x-amz-content-sha256: $empty\" \"$url?list-type=2&prefix=$prefix\") || fail \"listing s3://" + s.Bucket + "/$folder/ failed; " + b.service + " waits for the store\"\n")
	w.WriteString("keys=$(printf '%s' \"$listing\" | tr '<' '\\n' | sed -n 's/^Key>//p' | grep -E \"$re\" | sed -E 's/^(.*-([0-9]+)(\\.tar\\.gz)?)$/\\2 \\1/' | sort -rn | cut -d ' ' -f 2) || true\n")
	w.WriteString("[ -n \"$keys\" ] || fail \"s3://" + s.Bucket + "/$folder/ holds no snapshot of cluster $cluster\"\n")
	w.WriteString("mkdir -p " + EtcdSnapshotDir + "\ntmp=$(mktemp -d " + EtcdSnapshotDir + "/.restore.XXXXXX)\ntrap 'rm -rf \"$tmp\"' EXIT\n")
	w.WriteString("restored() {\n  printf 'snapshot=%s\\nrestored=%s\\n' \"$1\" \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" >\"$marker\"\n" +
		"  echo \"kairos-capi: etcd restore: restored $1 from s3://" + s.Bucket + "/$folder/\"\n  exit 0\n}\n")
	w.WriteString("for key in $keys; do\n  name=${key##*/}\n")
	if n.Distribution == K3s {
		args := []string{"k3s", "server", "--cluster-reset", "--cluster-reset-restore-path=\"$name\""}
		if b.cfg.K3s != nil {
			for _, a := range b.cfg.K3s.Args {
				args = append(args, shellQuote(a))
			}
		}
		w.WriteString("  rm -rf /var/lib/rancher/k3s/server/db\n")
		w.WriteString("  if " + strings.Join(args, " ") + "; then restored \"$name\"; fi\n")
		w.WriteString("  echo \"kairos-capi: etcd restore: k3s could not restore $name; trying an older snapshot\" >&2\n")
		w.WriteString("  rm -rf /var/lib/rancher/k3s/server/db\ndone\n")
	} else {
		pki, aside := K0sPKIDir, K0sPKIDir+".kairos-capi"
		w.WriteString("  if ! s3 -H \"x-amz-content-sha256: $empty\" -o \"$tmp/snapshot.tar.gz\" \"$url/$key\"; then\n" +
			"    echo \"kairos-capi: etcd restore: downloading $name failed; trying an older snapshot\" >&2; continue\n  fi\n")
		w.WriteString("  rm -rf " + aside + " && mv " + pki + " " + aside + "\n")
		w.WriteString("  if k0s restore --config-out=\"$tmp/k0s.yaml\" \"$tmp/snapshot.tar.gz\"; then\n")
		w.WriteString("    if cmp -s " + pki + "/ca.crt " + aside + "/ca.crt; then rm -rf " + aside + "; restored \"$name\"; fi\n")
		w.WriteString("    echo \"kairos-capi: etcd restore: $name is a snapshot of another cluster (its CA is not this cluster's); trying an older snapshot\" >&2\n")
		w.WriteString("  else\n    echo \"kairos-capi: etcd restore: k0s could not restore $name; trying an older snapshot\" >&2\n  fi\n")
		w.WriteString("  rm -rf " + pki + " /var/lib/k0s/etcd && mv " + aside + " " + pki + "\ndone\n")
	}
	w.WriteString("fail \"no snapshot of cluster $cluster in s3://" + s.Bucket + "/$folder/ restored; " + b.service + " does not start\"\n")
	return w.String()
}

// EtcdRestoreConfigMap (in kube-system) is where a node that restored a snapshot says which
// one, for the control plane to show: nodes never call the management cluster, so the report
// travels through the restored cluster. Its keys are snapshot, restored (the time) and node.
const EtcdRestoreConfigMap = "kairos-capi-etcd-restore"

// EtcdRestoreReportScript writes what EtcdRestoreMarker records to EtcdRestoreConfigMap; the
// bootstrap script runs it once the API server answers, before the sentinel, so the Machine is
// bootstrapped only once the report is in.
const EtcdRestoreReportScript = ScriptDir + "/etcd-restore-report.sh"

// restoreReportScript applies the ConfigMap with the distribution's kubectl and the node's
// admin credentials. The values are a snapshot name, a time and the hostname: no quoting issue.
func (b *builder) restoreReportScript() string {
	kubectl := string(b.n.Distribution) + " kubectl"
	return b.header("Reports the etcd snapshot this node restored in kube-system/"+EtcdRestoreConfigMap+" (docs/backups.md).") +
		"set -eu\n" +
		"[ -e " + EtcdRestoreMarker + " ] || exit 0\n" +
		"snapshot=$(sed -n 's/^snapshot=//p' " + EtcdRestoreMarker + ")\n" +
		"restored=$(sed -n 's/^restored=//p' " + EtcdRestoreMarker + ")\n" +
		"printf 'apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: " + EtcdRestoreConfigMap + "\\n  namespace: kube-system\\ndata:\\n  snapshot: \"%s\"\\n  restored: \"%s\"\\n  node: \"%s\"\\n' \"$snapshot\" \"$restored\" \"$(hostname)\" |\n" +
		"  " + kubectl + " apply -f - >/dev/null || { echo \"kairos-capi: reporting the etcd restore failed\" >&2; exit 1; }\n"
}
