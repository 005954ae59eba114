package fleet

import (
	"encoding/json"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// resource is one kind the simulated API server serves. The set is what Cluster API's
// ClusterCache and the kairos-capi managers read and write in a workload cluster (see doc.go);
// anything else answers 404, as a real API server does for a group it does not serve.
type resource struct {
	group, version, kind, plural, singular string
	namespaced                             bool
	// status: the kind has a status subresource, so the main resource ignores status and
	// /status ignores everything else (the API server's strategies for Nodes, Namespaces and
	// custom resources with subresources.status).
	status bool
	// typed returns the Go type of a built-in kind: objects are decoded into it and encoded
	// again, so that unknown fields are dropped and malformed ones refused as a real API server
	// would, and strategic merge patches use its patch strategy. nil for custom resources.
	typed func() any
	// typedList returns the Go type of the kind's list (for protobuf answers).
	typedList func() runtime.Object
	// conditionalUpdate: a PUT must carry metadata.resourceVersion (custom resources; built-in
	// kinds allow unconditional updates).
	conditionalUpdate bool
	// bumpsGeneration: metadata.generation counts changes outside metadata and status
	// (custom resources do; the built-in kinds served here do not set it).
	bumpsGeneration bool
}

func (r *resource) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

func (r *resource) groupResource() string {
	if r.group == "" {
		return r.plural
	}
	return r.plural + "." + r.group
}

// The resources every simulated cluster serves. Pods are served (always empty) because the
// ClusterCache looks up the controller's own Pod when it runs in a pod and Cluster API's drain
// lists Pods; a simulated single node runs none that matter to the managers.
var (
	resNamespaces = &resource{version: "v1", kind: "Namespace", plural: "namespaces", singular: "namespace", status: true,
		typed: func() any { return &corev1.Namespace{} }, typedList: func() runtime.Object { return &corev1.NamespaceList{} }}
	resNodes = &resource{version: "v1", kind: "Node", plural: "nodes", singular: "node", status: true,
		typed: func() any { return &corev1.Node{} }, typedList: func() runtime.Object { return &corev1.NodeList{} }}
	resSecrets = &resource{version: "v1", kind: "Secret", plural: "secrets", singular: "secret", namespaced: true,
		typed: func() any { return &corev1.Secret{} }, typedList: func() runtime.Object { return &corev1.SecretList{} }}
	resConfigMaps = &resource{version: "v1", kind: "ConfigMap", plural: "configmaps", singular: "configmap", namespaced: true,
		typed: func() any { return &corev1.ConfigMap{} }, typedList: func() runtime.Object { return &corev1.ConfigMapList{} }}
	resPods = &resource{version: "v1", kind: "Pod", plural: "pods", singular: "pod", namespaced: true, status: true,
		typed: func() any { return &corev1.Pod{} }, typedList: func() runtime.Object { return &corev1.PodList{} }}
	resLeases = &resource{group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", singular: "lease", namespaced: true,
		typed: func() any { return &coordinationv1.Lease{} }, typedList: func() runtime.Object { return &coordinationv1.LeaseList{} }}
	// resEtcdMembers mirrors k0s' EtcdMember CRD (etcd.k0sproject.io/v1beta1, cluster scoped,
	// status subresource) as test/simnode installs it (simnode/etcd.go, etcdMemberCRD).
	resEtcdMembers = &resource{group: simnode.EtcdMemberGVK.Group, version: simnode.EtcdMemberGVK.Version,
		kind: simnode.EtcdMemberGVK.Kind, plural: "etcdmembers", singular: "etcdmember", status: true,
		conditionalUpdate: true, bumpsGeneration: true}
)

// resourceSet is what one distribution's cluster serves, with its discovery documents encoded
// once and shared by every cluster of that distribution.
type resourceSet struct {
	list []*resource
	// byPath finds a resource by "group/version/plural" ("" group for the core API).
	byPath map[string]*resource
	// index is a resource's position in list: the store keys objects by it.
	index map[*resource]uint8
	// discovery documents by path: /api, /api/v1, /apis, /apis/<group>/<version>.
	discovery map[string][]byte
}

func newResourceSet(list ...*resource) *resourceSet {
	s := &resourceSet{list: list, byPath: map[string]*resource{}, index: map[*resource]uint8{}, discovery: map[string][]byte{}}
	groups := map[string]*metav1.APIResourceList{}
	var groupOrder []string
	for i, r := range list {
		s.byPath[r.group+"/"+r.version+"/"+r.plural] = r
		s.index[r] = uint8(i)
		gv := r.apiVersion()
		l, ok := groups[gv]
		if !ok {
			l = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
			groups[gv] = l
			groupOrder = append(groupOrder, gv)
		}
		verbs := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: r.plural, SingularName: r.singular, Namespaced: r.namespaced, Kind: r.kind, Verbs: verbs,
		})
		if r.status {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name: r.plural + "/status", Namespaced: r.namespaced, Kind: r.kind, Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
	}
	groupList := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, gv := range groupOrder {
		s.discovery["/"+pathPrefix(gv)] = mustJSON(groups[gv])
		r := groups[gv]
		if gv == "v1" {
			continue
		}
		var group, version string
		for _, res := range list {
			if res.apiVersion() == r.GroupVersion {
				group, version = res.group, res.version
				break
			}
		}
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: version}
		groupList.Groups = append(groupList.Groups, metav1.APIGroup{Name: group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd})
	}
	s.discovery["/apis"] = mustJSON(groupList)
	s.discovery["/api"] = mustJSON(metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: "127.0.0.1"}},
	})
	return s
}

// pathPrefix is where a group version is served: api/v1 or apis/<group>/<version>.
func pathPrefix(gv string) string {
	if gv == "v1" {
		return "api/v1"
	}
	return "apis/" + gv
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	return b
}

// The two distributions' resource sets: a k0s controller installs the EtcdMember CRD, k3s keeps
// its etcd membership in Node annotations and serves no such group.
var (
	k3sResources = newResourceSet(resNamespaces, resNodes, resSecrets, resConfigMaps, resPods, resLeases)
	k0sResources = newResourceSet(resNamespaces, resNodes, resSecrets, resConfigMaps, resPods, resLeases, resEtcdMembers)
)
