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
	// K3sEtcdSnapshotConfigPath holds k3s' snapshot and S3 settings (credentials included),
	// before the user's K3sUserConfigPath, which may not set them.
	K3sEtcdSnapshotConfigPath = "/etc/rancher/k3s/config.yaml.d/50-kairos-capi-etcd-snapshots.yaml"
	K3sEtcdS3CAPath           = "/etc/rancher/k3s/etcd-s3-ca.crt"

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
	if b.n.Distribution == K3s {
		b.file(K3sEtcdSnapshotConfigPath, 0o600, b.k3sEtcdSnapshotConfig())
		if s.CABundle != "" {
			b.file(K3sEtcdS3CAPath, 0o644, s.CABundle)
		}
		return
	}
	b.dir(EtcdSnapshotConfigDir, 0o700)
	b.file(EtcdSnapshotCurlConfig, 0o600, b.curlConfig())
	if s.CABundle != "" {
		b.file(EtcdSnapshotCA, 0o644, s.CABundle)
	}
	cron, _ := syntax.ParseCron(s.Schedule) // validated
	b.file(EtcdSnapshotUnitPath, 0o644, "# Generated by kairos-capi: a scheduled etcd snapshot of this k0s controller, uploaded to S3 (docs/backups.md).\n"+
		"[Unit]\nDescription=kairos-capi scheduled etcd snapshot\nAfter=k0scontroller.service\n\n"+
		"[Service]\nType=oneshot\nExecStart=/bin/sh "+EtcdSnapshotScript+" save scheduled\n")
	b.file(EtcdSnapshotTimerPath, 0o644, "# Generated by kairos-capi from the cron schedule \""+cron.String()+"\" (node time zone, as k3s' own schedule).\n"+
		"[Unit]\nDescription=kairos-capi scheduled etcd snapshots\n\n"+
		"[Timer]\nOnCalendar="+cron.OnCalendar()+"\nUnit="+EtcdSnapshotUnit+"\n")
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
	c := "# Generated by kairos-capi: the S3 credentials of the etcd snapshots, read by curl --config.\n" +
		"user = " + q(s.AccessKeyID+":"+s.SecretAccessKey) + "\n" +
		"aws-sigv4 = " + q("aws:amz:"+s.Region+":s3") + "\n"
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

// etcdSnapshotSteps returns the network stage step that starts the k0s timer and the
// before-upgrade step. The timer starts on every boot of an installed system (Kairos writes the
// units from the document each boot). The before-upgrade snapshot runs only once the node has
// bootstrapped: the first boot's image upgrade (imageScript) happens before etcd exists.
func (b *builder) etcdSnapshotSteps() (network []cloudconfig.Step, beforeUpgrade []cloudconfig.Step) {
	if b.n.EtcdSnapshots == nil {
		return nil, nil
	}
	if b.n.Distribution == K0s {
		network = append(network, cloudconfig.Step{
			Name:     stepSnapshotTimer,
			If:       notInstallerOrRecovery,
			Commands: []string{"systemctl daemon-reload", "systemctl start --no-block " + EtcdSnapshotTimer},
		})
	}
	beforeUpgrade = append(beforeUpgrade, cloudconfig.Step{
		Name:     stepSnapshotPreUpgrade,
		If:       notInstallerOrRecovery + " && [ -e " + BootstrapDoneMarker + " ]",
		Commands: []string{"/bin/sh " + EtcdSnapshotScript + " save pre-upgrade"},
	})
	return network, beforeUpgrade
}
