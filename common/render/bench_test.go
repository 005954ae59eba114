package render

import (
	"strconv"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/merge"
)

// BenchmarkRenderControlPlane renders (Document) the complete bootstrap
// document of a k0s init control plane: full PKI, a bootstrap-token manifest,
// pre/post commands, extra args and env, and a user ClusterConfig merged in.
func BenchmarkRenderControlPlane(b *testing.B) {
	n := k0sInitControlPlane(b, fixturePKI(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Document(n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderControlPlaneMinimal is the same node without the optional
// parts (no user Config to parse, no manifests, no commands).
func BenchmarkRenderControlPlaneMinimal(b *testing.B) {
	n := node(K0s, RoleControlPlane)
	n.Init = true
	n.PKI = fixturePKI(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Document(n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderWorker renders a k3s agent (what every MachineDeployment
// replica gets).
func BenchmarkRenderWorker(b *testing.B) {
	p := fixturePKI(b)
	n := node(K3s, RoleWorker)
	setK3sTokens(b, p, &n)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Document(n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderControlPlaneNewConfig is BenchmarkRenderControlPlane with a
// user ClusterConfig never seen before on every iteration (first render of a
// KairosConfig: the YAML parse is not cached yet).
func BenchmarkRenderControlPlaneNewConfig(b *testing.B) {
	n := k0sInitControlPlane(b, fixturePKI(b))
	base := n.Config
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		n.Config = base + "# " + strconv.Itoa(i) + "\n"
		if _, err := Document(n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderWorkerWithFragment adds a user fragment: the fragment and the
// merged document are then read as a node reads them (yip), which dominates.
func BenchmarkRenderWorkerWithFragment(b *testing.B) {
	p := fixturePKI(b)
	n := node(K3s, RoleWorker)
	setK3sTokens(b, p, &n)
	f := merge.Fragment{Name: "site", Content: []byte("#cloud-config\nstages:\n  network:\n    - name: ntp\n      commands: [timedatectl set-ntp true]\n")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Document(n, f); err != nil {
			b.Fatal(err)
		}
	}
}
