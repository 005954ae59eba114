package kairoscontrolplane

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// TestReconcileOrphans: what a cut-short Machine creation left behind goes; what a Machine
// controls, what has its Machine, and what another control plane owns stays.
func TestReconcileOrphans(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.machine("m1", time.Hour)
	// The killed manager created "lost"'s KairosConfig and infrastructure machine, not its Machine.
	f.machine("lost", time.Hour)
	lostConfig, lostInfra := f.configs["lost"], f.infras["lost"]
	f.machines = slices.DeleteFunc(f.machines, func(m *clusterv1.Machine) bool { return m.Name == "lost" })
	delete(f.configs, "lost")
	delete(f.infras, "lost")
	// A Machine being deleted controls its KairosConfig; Cluster API removes it.
	f.machine("adopted", time.Hour)
	adopted := f.configs["adopted"]
	adopted.OwnerReferences = append(adopted.OwnerReferences, metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "adopted", UID: "machine-uid", Controller: new(true)})
	f.machines = slices.DeleteFunc(f.machines, func(m *clusterv1.Machine) bool { return m.Name == "adopted" })
	delete(f.configs, "adopted")
	delete(f.infras, "adopted")
	// Another control plane's.
	f.machine("other", time.Hour)
	other := f.configs["other"]
	other.OwnerReferences[0].UID = "another-kcp"
	f.machines = slices.DeleteFunc(f.machines, func(m *clusterv1.Machine) bool { return m.Name == "other" })
	delete(f.configs, "other")
	delete(f.infras, "other")
	f.objs = append(f.objs, lostConfig, lostInfra, adopted, other)

	e := f.build()
	if _, err := e.r.reconcileOrphans(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	var configs, infras []string
	for _, c := range e.listConfigs() {
		configs = append(configs, c.Name)
	}
	for _, i := range e.listInfras() {
		infras = append(infras, i.GetName())
	}
	slices.Sort(configs)
	slices.Sort(infras)
	if !slices.Equal(configs, []string{"adopted", "m1", "other"}) || !slices.Equal(infras, []string{"m1"}) {
		t.Errorf("left KairosConfigs %v and infrastructure machines %v; want only the orphan of \"lost\" gone", configs, infras)
	}
}

// TestReconcileOrphansSaysWhenItCannotLook: when the infrastructure machines' API version cannot
// be resolved (their CRD is gone or unreadable), the search for orphans fails and says why,
// rather than skipping the infrastructure machines unnoticed.
func TestReconcileOrphansSaysWhenItCannotLook(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.noCRDs = true
	e := f.build()
	_, err := e.r.reconcileOrphans(ctx, e.scope(ctx))
	if err == nil {
		t.Fatal("reconcileOrphans without the infrastructure machine's CRD succeeded")
	}
	for _, want := range []string{"infrastructure machines left without their Machine", templateKind} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
