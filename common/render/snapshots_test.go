package render

import (
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
)

func snapshotNode(t *testing.T, d Distribution) Node {
	t.Helper()
	p := fixturePKI(t)
	n := node(d, RoleControlPlane)
	n.Init = true
	n.PKI = p
	if d == K3s {
		setK3sTokens(t, p, &n)
	}
	n.EtcdSnapshots = fixtureEtcdSnapshots(p)
	return n
}

func TestEtcdSnapshotsRefused(t *testing.T) {
	const secret = "SECRET-VALUE-never-in-messages"
	for name, tc := range map[string]struct {
		d      Distribution
		mutate func(n *Node)
		want   string
	}{
		"worker": {K0s, func(n *Node) {
			n.Role, n.Init, n.PKI, n.JoinToken = RoleWorker, false, nil, k0sToken(t, fixturePKI(t), "worker")
		}, "EtcdSnapshots: only control-plane nodes run etcd"},
		"schedule":        {K0s, func(n *Node) { n.EtcdSnapshots.Schedule = "0 0 1 * 1" }, "EtcdSnapshots.Schedule: \"0 0 1 * 1\" restricts both day of month and day of week"},
		"endpoint scheme": {K0s, func(n *Node) { n.EtcdSnapshots.Endpoint = "https://s3.example.com" }, "EtcdSnapshots.Endpoint: \"https://s3.example.com\" is not host[:port]"},
		"endpoint port":   {K0s, func(n *Node) { n.EtcdSnapshots.Endpoint = "s3.example.com:0" }, "is not host[:port]"},
		"bucket":          {K0s, func(n *Node) { n.EtcdSnapshots.Bucket = "Site_Backups" }, "EtcdSnapshots.Bucket: \"Site_Backups\" is not an S3 bucket name"},
		"folder":          {K3s, func(n *Node) { n.EtcdSnapshots.Folder = "a//b" }, "EtcdSnapshots.Folder"},
		"region":          {K3s, func(n *Node) { n.EtcdSnapshots.Region = "EU West" }, "EtcdSnapshots.Region"},
		"retention":       {K3s, func(n *Node) { n.EtcdSnapshots.Retention = 0 }, "EtcdSnapshots.Retention: 0 is not between 1 and 1000"},
		"ca": {K0s, func(n *Node) {
			n.EtcdSnapshots.CABundle = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
		}, "EtcdSnapshots.CABundle: is not a list of PEM certificates"},
		"ca key":         {K0s, func(n *Node) { n.EtcdSnapshots.CABundle = string(fixturePKI(t).ClusterCA.Key) }, "only CERTIFICATE blocks belong in a CA bundle"},
		"secret newline": {K0s, func(n *Node) { n.EtcdSnapshots.SecretAccessKey = secret + "\n" }, "the secret access key a line break"},
		"key colon":      {K3s, func(n *Node) { n.EtcdSnapshots.AccessKeyID = secret + ":" }, "the access key ID holds a ':'"},
		"no secret":      {K3s, func(n *Node) { n.EtcdSnapshots.SecretAccessKey = "" }, "are both required"},
		"restore on a joining node": {K3s, func(n *Node) {
			n.Init = false
			n.EtcdSnapshots.Restore = true
		}, "EtcdSnapshots.Restore: only the node that creates the cluster restores a snapshot; the others join it"},
		// k3s flags that would fight the rendered settings, in every place k3s reads flags.
		"k3s arg":     {K3s, func(n *Node) { n.Args = []string{"--etcd-s3-bucket=other"} }, "Args[0]: --etcd-s3-bucket is managed by kairos-capi: etcd snapshots are configured by etcdSnapshots"},
		"k3s disable": {K3s, func(n *Node) { n.Args = []string{"--etcd-disable-snapshots"} }, "--etcd-disable-snapshots is managed by kairos-capi"},
		"k3s config":  {K3s, func(n *Node) { n.Config = "etcd-snapshot-retention: 1\n" }, "Config: etcd-snapshot-retention: is managed by kairos-capi"},
		"k3s env":     {K3s, func(n *Node) { n.Env = map[string]string{"AWS_SECRET_ACCESS_KEY": secret} }, "Env.AWS_SECRET_ACCESS_KEY: k3s reads it as --etcd-s3-secret-key, which is managed by kairos-capi"},
	} {
		t.Run(name, func(t *testing.T) {
			n := snapshotNode(t, tc.d)
			tc.mutate(&n)
			_, err := Document(n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes a credential: %v", err)
			}
		})
	}
}

// Without etcdSnapshots, k3s snapshot flags and the AWS variables stay the user's: configs that
// used them before keep working.
func TestK3sSnapshotFlagsFreeWithoutEtcdSnapshots(t *testing.T) {
	n := snapshotNode(t, K3s)
	n.EtcdSnapshots = nil
	n.Args = []string{"--etcd-snapshot-retention=3"}
	n.Env = map[string]string{"AWS_ACCESS_KEY_ID": "x"}
	if _, err := Document(n); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdSnapshotsRendered(t *testing.T) {
	for _, d := range []Distribution{K0s, K3s} {
		t.Run(string(d), func(t *testing.T) {
			n := snapshotNode(t, d)
			c, err := Render(n)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]cloudconfig.File{}
			for _, f := range allFiles(c) {
				files[f.Path] = f
			}
			s := n.EtcdSnapshots
			// The credentials are in exactly one root-only file, and nowhere else.
			secretFile := map[Distribution]string{K0s: EtcdSnapshotCurlConfig, K3s: K3sEtcdSnapshotConfigPath}[d]
			for path, f := range files {
				has := strings.Contains(f.Content, "fixture") && strings.Contains(f.Content, "secret")
				switch {
				case path == secretFile && (!has || f.Permissions != 0o600):
					t.Errorf("%s: mode %o, holds the secret: %v", path, f.Permissions, has)
				case path != secretFile && has:
					t.Errorf("%s holds the secret key", path)
				}
			}
			for _, steps := range c.Stages {
				for _, st := range steps {
					for _, cmd := range st.Commands {
						if strings.Contains(cmd, s.AccessKeyID) {
							t.Errorf("step %q passes a credential on a command line: %s", st.Name, cmd)
						}
					}
				}
			}
			up := c.Stages[cloudconfig.StageBeforeUpgrade]
			if len(up) != 1 || up[0].Commands[0] != "/bin/sh "+EtcdSnapshotScript+" save pre-upgrade" ||
				!strings.Contains(up[0].If, "[ -e "+BootstrapDoneMarker+" ]") {
				t.Errorf("before-upgrade stage %+v", up)
			}
			timer := files[EtcdSnapshotTimerPath]
			if d == K0s && !strings.Contains(timer.Content, "OnCalendar=*-*-* 00,06,12,18:00:00\n") {
				t.Errorf("timer:\n%s", timer.Content)
			}
			if d == K3s && timer.Path != "" {
				t.Error("k3s schedules its own snapshots, but a timer is rendered")
			}
		})
	}
}
