// Package fleet simulates thousands of single-node Kairos workload clusters in one process, to
// measure what kairos-capi's managers cost per cluster (issue 35). test/simnode stays the proof
// of behaviour: there every cluster is a real etcd and kube-apiserver started from the documents
// the providers render. Here a cluster costs about 35 KiB of live heap (60 to 90 KiB of RSS)
// and 1.3 ms to start (TestFleetOfAThousand prints both), so one 2-core machine holds a fleet
// of thousands beside the managers under test.
//
// # What a simulated cluster is
//
// Each Cluster is one control-plane node with one etcd member, the shape of a Kairos edge site:
//
//   - Its own CA (ClusterSpec.CA, normally the management cluster's <cluster>-ca; generated
//     when not given) and its own TLS listener on APIHost (127.0.0.1) at a port of its own. The
//     server certificate is signed by that CA, so the kubeconfig Cluster API writes to
//     <cluster>-kubeconfig works as it is. Client certificates are verified against that CA
//     only, like kube-apiserver's --client-ca-file: another cluster's certificate, or none, is
//     answered 401 (apiserver.go, authenticate), as from an API server without anonymous
//     authentication (k3s runs its API server with --anonymous-auth=false; with anonymous
//     authentication on, a real server would refuse with 403 instead). There is no
//     authorization (every authenticated user is an administrator): Cluster API's kubeconfigs
//     are system:masters anyway.
//   - An object store served as the Kubernetes REST API (store.go, objects.go, apiserver.go):
//     discovery (/api, /apis, the group versions, the root path that the ClusterCache probes,
//     /version); GET, LIST and WATCH with one resourceVersion counter per cluster (etcd's
//     revision), label and metadata field selectors, watches that deliver exactly the changes
//     after the resourceVersion they start from, 410 Expired (as an ERROR event) for one older
//     than the last WatchHistory changes of its kind (kept per kind, as the watch cache does),
//     initial ADDED events for resourceVersion "" or "0", client-go's WatchList
//     (sendInitialEvents, ended by the initial-events-end bookmark; Cluster API's ClusterCache
//     watches Nodes this way) and a bookmark a minute with allowWatchBookmarks; CREATE
//     (generateName, the namespace must exist), UPDATE (optimistic concurrency; custom resources
//     need a resourceVersion), PATCH (JSON merge, JSON patch, strategic merge with the real
//     k8s.io/apimachinery implementation for built-in kinds, 415 for custom resources as the API
//     server answers), DELETE (preconditions, finalizers hold an object with a
//     deletionTimestamp), status subresources (the main resource ignores status, /status
//     ignores the rest), metadata.generation for custom resources, and the validation the
//     bootstrap provider relies on (a Node's providerID cannot change once set). A write that
//     changes nothing gets no new resourceVersion and no watch event, as from the API server,
//     and is counted (Stats.NoOpWrites): issue 35 asks for writes that change nothing.
//     Bodies and answers are JSON or protobuf: client-go v0.36 clients send and ask for
//     built-in kinds in protobuf by default, and get it (objects, lists and watch streams,
//     encoded by apimachinery's serializer from the stored JSON, a watch event once for all its
//     watchers: protobuf.go); custom resources are JSON, as from the API server.
//   - The kinds served: Namespaces, Nodes, Secrets, ConfigMaps, Pods (always empty: the
//     ClusterCache looks for its own Pod, drain lists them), coordination.k8s.io Leases, and on
//     k0s clusters k0s' EtcdMember (etcd.k0sproject.io/v1beta1, cluster scoped, as
//     test/simnode mirrors it). k3s clusters serve no such group and carry their member in the
//     Node's etcd.k3s.cattle.io annotations, as k3s does. These are every kind the control-plane
//     and bootstrap managers and Cluster API's Machine controller touch in a workload cluster
//     (found by reading their ClusterCache clients: kairoscontrolplane etcd.go, etcdstate.go,
//     taints.go, restore.go, inplacefailure.go; kairosconfig tokens.go, nodes.go; Cluster API
//     machine_controller.go and machine_controller_noderef.go). Server-side apply is not
//     served (415): none of them applies to a workload cluster; the control plane's one
//     Apply (machinesync.go) goes to the management cluster. The Kairos operator's NodeOpUpgrade
//     (in-place upgrades) is not served either: an in-place upgrade is not a steady-state cost.
//   - An etcd member (etcd.go) at its node's address (FirstNodeAddress onwards, one loopback
//     address per node) on port 2379, because the control plane dials every member at
//     <machine address>:2379 (etcdclient.go). It is real gRPC over TLS, with etcd's own
//     generated service interfaces (go.etcd.io/etcd/api/v3/etcdserverpb), client certificates of
//     the cluster's etcd CA required as etcd's --client-cert-auth does, and answers exactly what
//     the control plane calls: Maintenance.Status, Cluster.MemberList (linearizable or
//     serializable), Maintenance.Alarm (list), KV.Range (its quorum read) and
//     Cluster.MemberRemove (refused for the only member, as etcd refuses a change that leaves
//     no started member). One gRPC server serves every member; each connection's TLS
//     configuration and member are chosen by the address it arrived at. The state is the
//     simulation's: healthy and leading by default, SetEtcdLeaderless and SetEtcdAlarms change
//     it. Handshakes and calls are counted per member (EtcdStats): issue 35 asks for etcd dials
//     and handshakes per member per resync.
//   - A kubelet (kubelet.go) that registers a Node as the test infrastructure sets it up
//     (providerID simnode.ProviderID(namespace, machine), InternalIP, Ready, the control-plane
//     role, k3s' etcd annotations), renews its Lease in kube-node-lease every 10 s and reports
//     its status every 5 minutes (the kubelet's defaults), so every watch of Nodes or Leases
//     carries the churn a real fleet's does. One goroutine with a heap of due times serves all
//     kubelets: 2,000 nodes cost one timer. SetNodeReady changes the Ready condition.
//
// # What it does not model, and why that is honest enough for measuring cost
//
// The simulation answers every request the managers make with what a real cluster would answer,
// and refuses what a real one would refuse (wrong CA, stale resourceVersion, a changed
// providerID, a missing namespace). It does not model: admission, defaulting and most
// validation (the managers send valid objects; test/simnode runs the real API server for
// that), RBAC, API priority and fairness, pagination (limit is ignored: whole lists are
// answered, which servers may do), CBOR, the Node's image list (a real Node is several KiB
// larger), and etcd itself (no data
// in etcd, no raft: members are healthy or not as told). What the managers cost is requests,
// bytes, connections, TLS handshakes, watches and the churn they receive, and all of those are
// real here: real sockets, real TLS with per-cluster CAs, real HTTP/2 and gRPC, real
// client-go and etcd clients in the managers. Latency is the simulation's own (microseconds);
// slow and unreachable sites are the next step (Cluster.Close refuses connections already).
//
// # How Cluster API's in-memory provider differs
//
// Cluster API scaled KCP with its in-memory provider (test/infrastructure/inmemory in
// kubernetes-sigs/cluster-api; its module sigs.k8s.io/cluster-api/test is not served here at a
// version that builds, so nothing of it is used, and nothing was copied). Read:
// pkg/server/mux.go, pkg/server/api/handler.go, pkg/server/etcd/handler.go.
//
//   - Listeners: one http.Server (WorkloadClustersMux) serves every cluster's port, with the
//     cluster found by port and the certificate chosen per ClientHello (mux.go, getCertificate);
//     API and etcd share the port, told apart by the gRPC content type (mixedHandler), and etcd
//     is reached through port-forwards to etcd Pods, as KCP does. Here etcd has its own listener
//     at each node's address, because kairos-capi dials members directly.
//   - Client authentication: the mux's TLS configuration requests no client certificate, so any
//     client is served. Here only certificates of the cluster's CA are (401 otherwise, and etcd
//     fails the handshake), which issue 35 requires ("refuses the credentials ... a real
//     cluster would refuse").
//   - Store: a controller-runtime-like in-memory cache of typed objects per "resource group"
//     behind go-restful routes (handler.go); watches come from that cache's informers. Here
//     objects are kept as the JSON answered, with resourceVersion history for watch resumption.
//   - etcd: member state lives in annotations of fake etcd Pods (etcd/handler.go, inspectEtcd),
//     and the member is named by the :authority of the port-forward. Here it is the cluster's
//     member struct, and only what kairos-capi calls is served (plus KV.Range, which KCP does
//     not call).
//
// # Plugging into make bench-fleet
//
// test/bench/fleet (`make bench-fleet`, test/cmd/bench-fleet) starts a real management API
// server, Cluster API core and the benchmark's infrastructure provider in its own process, the
// unmodified control-plane and bootstrap managers as processes, and a Fleet in its own process.
// For each of N Clusters it makes the CAs first (NewCA: the <cluster>-ca and <cluster>-etcd
// Secrets it creates) and opens the API server's listener (ClusterSpec.APIListener), whose
// address is the Cluster's controlPlaneEndpoint; the fleet's cluster starts when the
// control-plane Machine has bootstrap data, with MachineName the Machine's name, as a Kairos
// node names itself after its Machine, and the infrastructure provider reports ProviderID,
// NodeAddress and NodeName on the KairosSimMachine. Workload requests are counted here per
// client (Options.Agents: the managers name themselves in their user agents), etcd handshakes
// and calls per member (EtcdStats), management requests by test/bench/e2e's proxy, all outside
// the managers, then divided per cluster per resync. Edge conditions (a share of sites refusing
// or black-holed, per-site latency) belong in the listeners' accept path and the handler (not
// done yet).
package fleet
