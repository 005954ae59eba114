package fleet

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// newFleet starts a fleet for one test, on node addresses of its own (127.100.<block>.x), so
// that tests never compete for an etcd port.
func newFleet(t *testing.T, block byte, opts Options) *Fleet {
	t.Helper()
	opts.FirstNodeAddress = netip.AddrFrom4([4]byte{127, 100, block, 1})
	f, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	require.NoError(t, coordinationv1.AddToScheme(s))
	return s
}

// TestControllerRuntimeClient drives one cluster with controller-runtime's client, as the
// managers do through Cluster API's ClusterCache: reads, the patches they send, conflicts and
// the validation they rely on.
func TestControllerRuntimeClient(t *testing.T) {
	f := newFleet(t, 1, Options{})
	c, err := f.Add(ClusterSpec{Namespace: "sites", Name: "site-1"})
	require.NoError(t, err)
	cfg, err := c.RESTConfig()
	require.NoError(t, err)
	cl, err := client.New(cfg, client.Options{Scheme: testScheme(t)})
	require.NoError(t, err)
	ctx := t.Context()

	node := &corev1.Node{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: c.NodeName()}, node))
	require.Equal(t, simnode.ProviderID("sites", "site-1-cp-0"), node.Spec.ProviderID)
	require.Equal(t, uint64(1), c.Stats().Protobuf, "controller-runtime reads built-in kinds in protobuf")
	require.Equal(t, c.NodeAddress().String(), node.Status.Addresses[0].Address)
	ready := false
	for _, cond := range node.Status.Conditions {
		ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
	}
	require.True(t, ready, "the Node is Ready")

	nodes := &corev1.NodeList{}
	require.NoError(t, cl.List(ctx, nodes, client.MatchingLabels{"node-role.kubernetes.io/control-plane": "true"}))
	require.Len(t, nodes.Items, 1)
	require.NoError(t, cl.List(ctx, nodes, client.MatchingLabels{"node-role.kubernetes.io/control-plane": "false"}))
	require.Empty(t, nodes.Items)

	// Cluster API's machine controller: a strategic merge patch of labels and taints.
	before := node.DeepCopy()
	node.Labels["cluster.x-k8s.io/owner"] = "site-1"
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	require.NoError(t, cl.Patch(ctx, node, client.StrategicMergeFrom(before)))
	require.Equal(t, "site-1", node.Labels["cluster.x-k8s.io/owner"])
	require.Len(t, node.Spec.Taints, 1)
	require.NotEqual(t, before.ResourceVersion, node.ResourceVersion)

	// A patch that changes nothing keeps the resourceVersion and is counted as such.
	rv := node.ResourceVersion
	require.NoError(t, cl.Patch(ctx, node, client.MergeFrom(node.DeepCopy())))
	require.Equal(t, rv, node.ResourceVersion)
	require.Equal(t, uint64(1), c.Stats().NoOpWrites)

	// The bootstrap provider's optimistic lock: a stale resourceVersion conflicts.
	stale := before.DeepCopy()
	patched := stale.DeepCopy()
	patched.Annotations["x"] = "y"
	err = cl.Patch(ctx, patched, client.MergeFromWithOptions(stale, client.MergeFromWithOptimisticLock{}))
	require.True(t, apierrors.IsConflict(err), "stale patch: %v", err)

	// The API server refuses to change a provider ID once set.
	changed := node.DeepCopy()
	changed.Spec.ProviderID = "other://id"
	err = cl.Patch(ctx, changed, client.MergeFrom(node))
	require.True(t, apierrors.IsInvalid(err), "providerID change: %v", err)

	// The main resource ignores status; /status changes only status.
	notReady := node.DeepCopy()
	notReady.Status.Conditions = nil
	require.NoError(t, cl.Update(ctx, notReady))
	require.Len(t, notReady.Status.Conditions, 4)

	// Secrets in kube-system (bootstrap tokens), create, conflict, JSON patch, delete.
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"},
		Type: "bootstrap.kubernetes.io/token", Data: map[string][]byte{"token-id": []byte("abcdef")}}
	require.NoError(t, cl.Create(ctx, s))
	require.True(t, apierrors.IsAlreadyExists(cl.Create(ctx, s.DeepCopy())))
	require.NoError(t, cl.Patch(ctx, s, client.RawPatch(types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/data/expiration","value":"MjAzMC0wMS0wMVQwMDowMDowMFo="}]`))))
	require.Equal(t, "2030-01-01T00:00:00Z", string(s.Data["expiration"]))
	require.True(t, apierrors.IsNotFound(cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "missing", Name: "x"}})))
	require.NoError(t, cl.Delete(ctx, s))
	require.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{})))

	// k0s' EtcdMember, unstructured, merge-patched as the control plane asks a member to leave.
	em := &unstructured.Unstructured{}
	em.SetGroupVersionKind(simnode.EtcdMemberGVK)
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: c.EtcdMemberName()}, em))
	id, _, _ := unstructured.NestedString(em.Object, "status", "memberID")
	require.Equal(t, strconv.FormatUint(c.EtcdMemberID(), 16), id)
	gen := em.GetGeneration()
	p := client.MergeFrom(em.DeepCopy())
	require.NoError(t, unstructured.SetNestedField(em.Object, true, "spec", "leave"))
	require.NoError(t, cl.Patch(ctx, em, p))
	require.Equal(t, gen+1, em.GetGeneration())
	err = cl.Patch(ctx, em, client.StrategicMergeFrom(em.DeepCopy()))
	require.Equal(t, int32(415), statusCode(err), "strategic merge on a custom resource: %v", err)
}

func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// TestInformersSeeKubeletChurn lists and watches with client-go's informers: the Node, and the
// Lease the kubelet renews.
func TestInformersSeeKubeletChurn(t *testing.T) {
	f := newFleet(t, 2, Options{LeaseInterval: 100 * time.Millisecond})
	c, err := f.Add(ClusterSpec{Name: "site-1", Distribution: K3s})
	require.NoError(t, err)
	cfg, err := c.RESTConfig()
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	factory := informers.NewSharedInformerFactory(cs, 0)
	var renewals atomic.Int32
	var lastRenew atomic.Int64
	leases := factory.Coordination().V1().Leases().Informer()
	_, err = leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*coordinationv1.Lease), newObj.(*coordinationv1.Lease)
			if n.Spec.RenewTime.After(o.Spec.RenewTime.Time) {
				renewals.Add(1)
				lastRenew.Store(n.Spec.RenewTime.UnixNano())
			}
		},
	})
	require.NoError(t, err)
	nodes := factory.Core().V1().Nodes().Informer()
	factory.Start(t.Context().Done())
	t.Cleanup(factory.Shutdown)
	require.True(t, cache.WaitForCacheSync(t.Context().Done(), leases.HasSynced, nodes.HasSynced))

	require.Eventually(t, func() bool { return renewals.Load() >= 3 }, 10*time.Second, 20*time.Millisecond)
	obj, ok, err := nodes.GetStore().GetByKey(c.NodeName())
	require.NoError(t, err)
	require.True(t, ok)
	n := obj.(*corev1.Node)
	require.Equal(t, c.EtcdMemberName(), n.Annotations[simnode.K3sNodeNameAnnotation])

	// The kubelet reports NotReady: the informer sees it.
	require.NoError(t, c.SetNodeReady(false))
	require.Eventually(t, func() bool {
		obj, _, _ := nodes.GetStore().GetByKey(c.NodeName())
		for _, cond := range obj.(*corev1.Node).Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionFalse
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond)
	require.Zero(t, f.KubeletErrors())
}

// TestWatchSemantics checks resourceVersions as a reflector relies on them: a watch from a
// list's resourceVersion gets exactly the changes after it; one from a compacted version gets
// 410 Expired; sendInitialEvents ends its initial events with a bookmark.
func TestWatchSemantics(t *testing.T) {
	f := newFleet(t, 3, Options{LeaseInterval: time.Hour, StatusInterval: time.Hour, WatchHistory: 4, BookmarkInterval: 50 * time.Millisecond})
	c, err := f.Add(ClusterSpec{Name: "site-1"})
	require.NoError(t, err)
	cfg, err := c.RESTConfig()
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := t.Context()
	cms := cs.CoreV1().ConfigMaps("default")

	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	list, err := cms.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Labels: map[string]string{"a": "b"}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	protobufBefore := c.Stats().Protobuf
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	require.Equal(t, protobufBefore+1, c.Stats().Protobuf, "client-go's clientset watches in protobuf")
	ev := next(t, w)
	require.Equal(t, watch.Added, ev.Type)
	require.Equal(t, "after", ev.Object.(*corev1.ConfigMap).Name)
	require.NoError(t, cms.Delete(ctx, "before", metav1.DeleteOptions{}))
	ev = next(t, w)
	require.Equal(t, watch.Deleted, ev.Type)
	require.Equal(t, "before", ev.Object.(*corev1.ConfigMap).Name)
	w.Stop()

	// A label-selected watch sees an object leave its selection as a deletion.
	sel, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: "a=b"})
	require.NoError(t, err)
	require.Equal(t, watch.Added, next(t, sel).Type)
	_, err = cms.Patch(ctx, "after", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Equal(t, watch.Deleted, next(t, sel).Type)
	sel.Stop()

	// Beyond the history, the watch expires.
	for i := range 6 {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "churn-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	old, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	ev = next(t, old)
	require.Equal(t, watch.Error, ev.Type)
	require.True(t, apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)), "expected 410 Expired, got %v", ev.Object)
	old.Stop()

	// History is kept per kind: Lease churn does not expire a Secret watch's resourceVersion,
	// and with bookmarks allowed the watch is told the current one.
	secrets, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range 6 {
		_, err = cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	sw, err := cs.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: secrets.ResourceVersion, AllowWatchBookmarks: true})
	require.NoError(t, err)
	ev = next(t, sw)
	require.Equal(t, watch.Bookmark, ev.Type)
	current, err := cms.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, current.ResourceVersion, ev.Object.(*corev1.Secret).ResourceVersion)
	sw.Stop()

	// WatchList: initial events, then the bookmark that ends them.
	wl, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptrTo(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	require.NoError(t, err)
	for range 7 {
		require.Equal(t, watch.Added, next(t, wl).Type)
	}
	ev = next(t, wl)
	require.Equal(t, watch.Bookmark, ev.Type)
	require.Equal(t, "true", ev.Object.(*corev1.ConfigMap).Annotations["k8s.io/initial-events-end"])
	wl.Stop()
}

func ptrTo[T any](v T) *T { return &v }

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		require.True(t, ok, "the watch ended")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
		return watch.Event{}
	}
}

// TestRefusesOtherCredentials: a client certificate of another cluster's CA, or none, gets 401,
// as from a real API server.
func TestRefusesOtherCredentials(t *testing.T) {
	f := newFleet(t, 4, Options{})
	a, err := f.Add(ClusterSpec{Name: "site-a"})
	require.NoError(t, err)
	b, err := f.Add(ClusterSpec{Name: "site-b"})
	require.NoError(t, err)
	bCfg, err := b.RESTConfig()
	require.NoError(t, err)
	aCA := a.CA()

	// b's admin certificate, presented to a's API server (trusting a's serving certificate).
	cross := rest.CopyConfig(bCfg)
	cross.Host = "https://" + a.Endpoint()
	cross.CAData = aCA.Cert
	cs, err := kubernetes.NewForConfig(cross)
	require.NoError(t, err)
	_, err = cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsUnauthorized(err), "a certificate of another cluster's CA: %v", err)

	anon := &rest.Config{Host: "https://" + a.Endpoint(), TLSClientConfig: rest.TLSClientConfig{CAData: aCA.Cert}}
	cs, err = kubernetes.NewForConfig(anon)
	require.NoError(t, err)
	_, err = cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsUnauthorized(err), "no certificate: %v", err)
	require.Equal(t, uint64(2), a.Stats().Unauthorized)
	require.Equal(t, uint64(2), a.Stats().Handshakes, "one connection per client")

	// The server's certificate is a's: a client trusting b's CA refuses a's server.
	wrongServer := rest.CopyConfig(bCfg)
	wrongServer.Host = "https://" + a.Endpoint()
	cs, err = kubernetes.NewForConfig(wrongServer)
	require.NoError(t, err)
	_, err = cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	// Discovery, as controller-runtime's REST mapper reads it.
	aCfg, err := a.RESTConfig()
	require.NoError(t, err)
	cs, err = kubernetes.NewForConfig(aCfg)
	require.NoError(t, err)
	groups, resources, err := cs.Discovery().ServerGroupsAndResources()
	require.NoError(t, err)
	var names []string
	for _, g := range groups {
		names = append(names, g.Name)
	}
	require.Contains(t, names, "etcd.k0sproject.io")
	require.Contains(t, names, "coordination.k8s.io")
	require.NotEmpty(t, resources)
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/").DoRaw(context.Background())
	require.NoError(t, err, "Cluster API's health probe")
	require.True(t, json.Valid(raw))
}

// TestGivenCAs: a cluster serves with the CAs the management cluster holds (RSA, made by
// kairos-capi's common/pki as <cluster>-ca and <cluster>-etcd), and a kubeconfig signed by that
// CA the way Cluster API writes <cluster>-kubeconfig works against it.
func TestGivenCAs(t *testing.T) {
	f := newFleet(t, 7, Options{})
	ca, err := pki.NewCA("kubernetes", pki.DefaultCAValidity)
	require.NoError(t, err)
	etcdCA, err := pki.NewCA("etcd-ca", pki.DefaultCAValidity)
	require.NoError(t, err)
	c, err := f.Add(ClusterSpec{Name: "site-1", CA: ca, EtcdCA: etcdCA})
	require.NoError(t, err)
	require.Equal(t, ca.Cert, c.CA().Cert)

	admin, err := ca.SignClient("kubernetes-admin", []string{"system:masters"}, pki.DefaultCertValidity)
	require.NoError(t, err)
	kc, err := KubeconfigFor("site-1", "https://"+c.Endpoint(), ca.Cert, *admin)
	require.NoError(t, err)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	n, err := cs.CoreV1().Nodes().Get(t.Context(), c.NodeName(), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, c.ProviderID(), n.Spec.ProviderID)

	etcdClientCert, err := etcdCA.SignClient("kairos-capi-controlplane", nil, pki.DefaultCertValidity)
	require.NoError(t, err)
	cl := etcdClient(t, c, etcdClientCert, *etcdCA, 2*time.Second)
	st, err := cl.Status(t.Context(), c.EtcdEndpoint())
	require.NoError(t, err)
	require.Equal(t, c.EtcdMemberID(), st.Leader)
}

// TestAgentsAndListener serves a cluster on a listener opened before it (a Cluster's endpoint
// known before its machine boots) and counts its requests per client by user agent.
func TestAgentsAndListener(t *testing.T) {
	f := newFleet(t, 8, Options{Agents: []string{"manager-a", "manager-b"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c, err := f.Add(ClusterSpec{Name: "site-1", APIListener: ln})
	require.NoError(t, err)
	require.Equal(t, ln.Addr().String(), c.Endpoint())
	cfg, err := c.RESTConfig()
	require.NoError(t, err)
	get := func(agent string, n int) {
		cfg := rest.CopyConfig(cfg)
		cfg.UserAgent = agent
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		for range n {
			_, err := cs.CoreV1().Nodes().Get(t.Context(), c.NodeName(), metav1.GetOptions{})
			require.NoError(t, err)
		}
	}
	get("kairos/v1 manager-a", 1)
	get("x/v1 (linux/amd64) cluster.x-k8s.io/manager-b", 2)
	get("someone-else", 3)
	require.Equal(t, uint64(1), c.AgentStats(0).Reads)
	require.Equal(t, uint64(2), c.AgentStats(1).Reads)
	require.Equal(t, uint64(3), c.AgentStats(2).Reads)
	require.Equal(t, uint64(6), c.Stats().Reads)
	require.Zero(t, c.AgentStats(3).Reads)
}
