package initlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/kairos-capi/kairos-capi/bootstrap/internal/initlock"
)

const ns = "team-a"

var testCluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo", UID: "cluster-uid"}}

func machine(name string) *clusterv1.Machine {
	return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func newLock(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) (*initlock.Lock, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clusterv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	return &initlock.Lock{Client: c, Reader: c}, c
}

func acquire(t *testing.T, l *initlock.Lock, m string) bool {
	t.Helper()
	ok, err := l.Acquire(context.Background(), testCluster, m)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", m, err)
	}
	return ok
}

func holder(t *testing.T, l *initlock.Lock) string {
	t.Helper()
	h, err := l.Holder(context.Background(), testCluster)
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	return h
}

func TestName(t *testing.T) {
	if got := initlock.Name(testCluster); got != "demo-kairos-init-lock" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestFirstAcquirerWins(t *testing.T) {
	l, c := newLock(t, nil, machine("m1"), machine("m2"))

	if h := holder(t, l); h != "" {
		t.Fatalf("Holder() before any Acquire = %q, want empty", h)
	}
	if !acquire(t, l, "m1") {
		t.Fatal("the first Machine did not get the lock")
	}
	if acquire(t, l, "m2") {
		t.Fatal("a second Machine got the lock while the first exists")
	}
	if !acquire(t, l, "m1") {
		t.Fatal("the holder could not re-acquire its own lock")
	}
	if h := holder(t, l); h != "m1" {
		t.Fatalf("Holder() = %q, want m1", h)
	}

	// The lock is a ConfigMap owned by the Cluster, so it moves and goes with it.
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: initlock.Name(testCluster)}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[clusterv1.ClusterNameLabel] != "demo" {
		t.Errorf("labels = %v, want the cluster-name label", cm.Labels)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "Cluster" || cm.OwnerReferences[0].Name != "demo" ||
		cm.OwnerReferences[0].UID != "cluster-uid" || cm.OwnerReferences[0].APIVersion != clusterv1.GroupVersion.String() {
		t.Errorf("owner references = %+v, want the Cluster", cm.OwnerReferences)
	}
}

func TestStaleHolderIsReplaced(t *testing.T) {
	l, c := newLock(t, nil, machine("m1"), machine("m2"))
	if !acquire(t, l, "m1") {
		t.Fatal("m1 did not get the lock")
	}
	if err := c.Delete(context.Background(), machine("m1")); err != nil {
		t.Fatal(err)
	}
	if !acquire(t, l, "m2") {
		t.Fatal("the lock of a deleted Machine was not handed over")
	}
	if h := holder(t, l); h != "m2" {
		t.Fatalf("Holder() = %q, want m2", h)
	}
	// And m2 now keeps it against newcomers.
	if acquire(t, l, "m3") {
		t.Fatal("m3 took the lock from an existing holder")
	}
}

func TestRelease(t *testing.T) {
	l, c := newLock(t, nil, machine("m1"), machine("m2"))
	if !acquire(t, l, "m1") {
		t.Fatal("m1 did not get the lock")
	}
	if err := l.Release(context.Background(), testCluster); err != nil {
		t.Fatal(err)
	}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: initlock.Name(testCluster)}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the lock ConfigMap still exists after Release: %v", err)
	}
	if h := holder(t, l); h != "" {
		t.Fatalf("Holder() after Release = %q", h)
	}
	// Releasing twice is fine: the reconciler releases on every pass once initialized.
	if err := l.Release(context.Background(), testCluster); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if !acquire(t, l, "m2") {
		t.Fatal("the lock could not be taken after Release")
	}
}

func TestLocksArePerCluster(t *testing.T) {
	l, _ := newLock(t, nil, machine("m1"), machine("m2"))
	other := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}}
	if !acquire(t, l, "m1") {
		t.Fatal("m1 did not get the lock")
	}
	ok, err := l.Acquire(context.Background(), other, "m2")
	if err != nil || !ok {
		t.Fatalf("the lock of another Cluster was not free: %v, %v", ok, err)
	}
}

func TestLostCreateRace(t *testing.T) {
	// Another reconciler created the lock between our read and our create.
	l, _ := newLock(t, &interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, "demo-kairos-init-lock")
		},
	}, machine("m1"))
	ok, err := l.Acquire(context.Background(), testCluster, "m1")
	if err != nil || ok {
		t.Fatalf("Acquire after a lost race = %v, %v; want false, nil", ok, err)
	}
}

func TestErrors(t *testing.T) {
	boom := errors.New("boom")
	failGet := func(kind string) *interceptor.Funcs {
		return &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isCM := obj.(*corev1.ConfigMap); isCM == (kind == "configmap") {
				return boom
			}
			return c.Get(ctx, key, obj, opts...)
		}}
	}
	existing := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: initlock.Name(testCluster)},
		Data:       map[string]string{"machine": "m1"},
	}

	tests := []struct {
		name  string
		funcs *interceptor.Funcs
		objs  []client.Object
		call  func(*initlock.Lock) error
		want  string
	}{
		{"reading the lock", failGet("configmap"), nil, func(l *initlock.Lock) error {
			_, err := l.Acquire(context.Background(), testCluster, "m2")
			return err
		}, "reading init lock: boom"},
		{"reading the holder", failGet("machine"), []client.Object{existing}, func(l *initlock.Lock) error {
			_, err := l.Acquire(context.Background(), testCluster, "m2")
			return err
		}, "reading init lock holder: boom"},
		{"creating the lock", &interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return boom }}, nil,
			func(l *initlock.Lock) error {
				_, err := l.Acquire(context.Background(), testCluster, "m2")
				return err
			}, "creating init lock: boom"},
		{"releasing a stale lock", &interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return boom }},
			[]client.Object{existing}, func(l *initlock.Lock) error {
				_, err := l.Acquire(context.Background(), testCluster, "m2")
				return err
			}, "releasing stale init lock: boom"},
		{"Holder", failGet("configmap"), nil, func(l *initlock.Lock) error {
			_, err := l.Holder(context.Background(), testCluster)
			return err
		}, "reading init lock: boom"},
		{"Release", &interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return boom }},
			[]client.Object{existing}, func(l *initlock.Lock) error { return l.Release(context.Background(), testCluster) }, "releasing init lock: boom"},
		{"Release reading the lock", failGet("configmap"), nil, func(l *initlock.Lock) error { return l.Release(context.Background(), testCluster) }, "reading init lock: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLock(t, tc.funcs, tc.objs...)
			err := tc.call(l)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, boom) {
				t.Fatalf("error = %v, want %q wrapping the cause", err, tc.want)
			}
		})
	}
}

// TestReleaseWithoutALockWritesNothing: every node bootstrapped after the control plane came
// up releases the lock; when there is none, that costs no write, and once a Cluster's lock is
// known to be gone, no request at all.
func TestReleaseWithoutALockWritesNothing(t *testing.T) {
	var deletes, gets atomic.Int32
	l, _ := newLock(t, &interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	// Many configs reconciled at once after a start release it together.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := l.Release(context.Background(), testCluster); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if deletes.Load() != 0 || gets.Load() != 1 {
		t.Errorf("%d DELETEs and %d GETs for 20 concurrent releases without a lock, want none and one", deletes.Load(), gets.Load())
	}
}

func TestAcquireDoesNotTakeALockWhoseHolderCannotBeRead(t *testing.T) {
	// Failing to read the holder must never be mistaken for the holder being gone.
	existing := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: initlock.Name(testCluster)},
		Data:       map[string]string{"machine": "m1"},
	}
	l, c := newLock(t, &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*clusterv1.Machine); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "machines"}, key.Name, errors.New("rbac"))
		}
		return c.Get(ctx, key, obj, opts...)
	}}, existing)
	if ok, err := l.Acquire(context.Background(), testCluster, "m2"); ok || err == nil {
		t.Fatalf("Acquire = %v, %v; want false and an error", ok, err)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(existing), cm); err != nil || cm.Data["machine"] != "m1" {
		t.Fatalf("the lock changed hands: %v, %v", cm.Data, err)
	}
}
