package render

import (
	"strings"
	"testing"
)

// kairosPersistentPaths are the paths an installed Kairos system keeps across reboots and
// upgrades: /usr/local and /oem (partitions of their own), and the default bind mounts onto
// the persistent partition listed in Kairos' architecture docs ("Immutable", default persistent
// paths, kairos-docs docusaurus/versioned_docs/version-v3.5.7/architecture/immutable.md); only
// the ones a Kubernetes node needs are listed. Everything else of /etc and /var is ephemeral
// there: a file written outside these paths is gone after the first reboot.
var kairosPersistentPaths = []string{
	"/usr/local", "/oem",
	"/etc/cni", "/etc/k0s", "/etc/kubernetes", "/etc/rancher", "/etc/ssh", "/etc/ssl/certs", "/etc/systemd",
	"/home", "/opt", "/root", "/usr/libexec",
	"/var/lib/cni", "/var/lib/containerd", "/var/lib/etcd", "/var/lib/k0s", "/var/lib/kubelet",
	"/var/lib/rancher", "/var/lib/kairos", "/var/log",
}

// distributionStatePaths is where k0s and k3s keep the state a node needs after a reboot: their
// default data directories (k0s --data-dir /var/lib/k0s, docs.k0sproject.io "k0s directories";
// k3s --data-dir /var/lib/rancher/k3s), the kubelet's root (/var/lib/kubelet), k3s' node
// password (/etc/rancher/node/password) and configuration (/etc/rancher/k3s), k0s'
// configuration (/etc/k0s).
var distributionStatePaths = []string{
	"/var/lib/k0s", "/etc/k0s", "/var/lib/rancher/k3s", "/etc/rancher/k3s", "/etc/rancher/node", "/var/lib/kubelet",
}

func persistentOnKairos(path string) bool {
	for _, p := range kairosPersistentPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// TestStatePersistsOnKairos: what a node creates at run time and needs after a reboot lives in
// Kairos' persistent paths, so the bootstrap data renders no extra bind mount: k0s' and k3s'
// state, the marker that the first bootstrap happened (the preflight's version pin and the
// bootstrap service read it on later boots) and the boot assessment's last verified release. Files the document writes need no such care: a
// Kairos node applies its cloud-config stages again on every boot. The Cluster API sentinel
// lives in /run on purpose, as the bootstrap contract's marker of this boot.
func TestStatePersistsOnKairos(t *testing.T) {
	for _, p := range append(distributionStatePaths, BootstrapDoneMarker, VerifiedReleaseFile) {
		if !persistentOnKairos(p) {
			t.Errorf("%s is not persistent on Kairos: it is gone after a reboot", p)
		}
	}
	if persistentOnKairos(SentinelPath) || !strings.HasPrefix(SentinelPath, "/run/") {
		t.Errorf("the sentinel %s must not survive a reboot", SentinelPath)
	}
	// The boot assessment's marker says "armed during this boot": a later boot must not see it.
	if persistentOnKairos(BootAssessmentArmedMarker) || !strings.HasPrefix(BootAssessmentArmedMarker, "/run/") {
		t.Errorf("%s must not survive a reboot", BootAssessmentArmedMarker)
	}
}
