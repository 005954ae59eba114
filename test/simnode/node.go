package simnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientretry "k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// Phase is where a simulated node is in its life.
type Phase string

const (
	// PhaseBooting: the node is starting or joining its distribution (and retrying, like a real
	// service restarted by systemd, when it cannot yet).
	PhaseBooting Phase = "Booting"
	// PhaseRunning: the distribution is up.
	PhaseRunning Phase = "Running"
	// PhaseRefused: the node refuses its bootstrap data for good (the document does not load,
	// or the preflight check fails); it never starts the distribution.
	PhaseRefused Phase = "Refused"
	// PhaseStopped: the machine is gone.
	PhaseStopped Phase = "Stopped"
)

// Reasons a node reports in its Status.
const (
	ReasonBooting = "Booting"
	// ReasonBootstrapDataRefused: the document fails the checks a node's loader applies, or lacks
	// what the distribution needs (PKI, token file, ...).
	ReasonBootstrapDataRefused = "BootstrapDataRefused"
	// ReasonPreflightFailed: the installed distribution is not the version the data requires.
	ReasonPreflightFailed = "PreflightFailed"
	// ReasonWaitingForControlPlane: nothing serves the endpoint the node joins (yet).
	ReasonWaitingForControlPlane = "WaitingForControlPlane"
	// ReasonJoinFailed: the cluster rejected the node's credentials (token, CA).
	ReasonJoinFailed = "JoinFailed"
	// ReasonStartFailed: the API server of an init node did not come up.
	ReasonStartFailed = "StartFailed"
	// ReasonClusterExists: an init node found a cluster already running at its endpoint.
	ReasonClusterExists = "ClusterAlreadyExists"
	// ReasonRunning: the distribution is up and the sentinel written.
	ReasonRunning = "Running"
	// ReasonNoSentinel: the distribution is up but the document never starts the unit that
	// writes the bootstrap sentinel.
	ReasonNoSentinel = "SentinelNotWritten"
	// ReasonStopped: the machine is gone.
	ReasonStopped = "Stopped"
)

// Status is what a node reports.
type Status struct {
	Phase   Phase
	Reason  string
	Message string
	// NodeName is the name the node registers (its hostname), once its document is loaded.
	NodeName string
	// Sentinel tells that /run/cluster-api/bootstrap-success.complete exists.
	Sentinel bool
}

// NodeSpec is what a simulated machine hands its node.
type NodeSpec struct {
	// Namespace and Name identify the KairosSimMachine (or the instance of a
	// KairosSimMachinePool); Name is the node name when the document sets no hostname.
	Namespace, Name string
	// Pool is the KairosSimMachinePool (in Namespace) the node is an instance of; empty for
	// the node of a KairosSimMachine.
	Pool string
	// ProviderID is the machine's provider ID as its infrastructure provider knows it (the
	// KairosSimMachine's spec.providerID); the registry finds the node by it. The node itself
	// does not know it: its Node gets the provider ID its document gives it (see
	// kubeletProviderID). Default: ProviderID(Namespace, Name).
	ProviderID string
	// SystemUUID is the machine's DMI product UUID (/sys/class/dmi/id/product_uuid, what
	// the kubelet reports as systemUUID and vSphere and Proxmox build provider IDs from).
	// Default: a random one.
	SystemUUID string
	// Files are put under the node's root before it boots: what the machine's datasource
	// extracts from its infrastructure (vSphere's guestinfo metadata, which Kairos' yip writes
	// to /run/config/metadata), by absolute path.
	Files map[string]string
	// Endpoint is host:port of the machine's cluster (the KairosSimCluster's endpoint).
	Endpoint string
	// APIBackendPort is the port the endpoint forwards to on control-plane nodes, as a load
	// balancer does (443 -> 6443); 0 means the nodes serve the endpoint's own port.
	APIBackendPort int
	// EndpointIsVIP says that no load balancer answers on the endpoint: it is a virtual IP,
	// reachable only while a running control-plane node whose document makes it hold the
	// address (k0s keepalived, kube-vip) holds it.
	EndpointIsVIP bool
	// FailFirstInitAfterAPIServer makes an init node's first boot attempt fail transiently
	// once its API server runs, as the sandbox's demo cluster once did: the node's retry must
	// reuse its own cluster, as a real k0s/k3s init node does with its data directory.
	FailFirstInitAfterAPIServer bool
	// Data is the bootstrap document (the bootstrap Secret's value).
	Data []byte
	// InstalledVersion is what the image ships (KairosSimMachine spec.installedVersion); empty
	// means what the document requires.
	InstalledVersion string
	// Image is the reference of the Kairos image the machine boots (see image.go): its
	// distribution and version are what the node runs. Empty means the standard Kairos image
	// (KairosImage) of the document's distribution at InstalledVersion. With both set, they must
	// agree.
	Image string
}

// Node is one simulated Kairos node.
type Node struct {
	reg       *Registry
	spec      NodeSpec
	root      string
	machineID string
	// ip is the node's own address: its Node's InternalIP, its machine's address, its etcd
	// member's peer (and, where the distribution serves it there, client) address.
	ip string

	mu      sync.Mutex
	status  Status
	plan    *plan
	cluster *Cluster
	// injectedInitFailure records that FailFirstInitAfterAPIServer fired.
	injectedInitFailure atomic.Bool
	// bootFailures are the errors of the failed attempts to start or join the distribution, in
	// order (guarded by mu).
	bootFailures []string
	// lastUpgrade is the result of the last Upgrade.
	lastUpgrade error
	// etcd is the node's etcd member (control-plane nodes).
	etcd   *etcdServer
	cancel context.CancelFunc
	done   chan struct{}
	// kubelet is the node's running kubelet (lease and status heartbeats), nil while none runs;
	// notReady is the Ready condition it reports when not Ready (SetReady), nil for Ready.
	kubelet  *kubeletRun
	notReady *corev1.NodeCondition
	// stalled tells that the node stalls after joining etcd (Registry.HoldServerStarts), and
	// addressesHidden that its machine has no address to report yet (its guest agent is not up).
	stalled         atomic.Bool
	addressesHidden atomic.Bool

	// images are the node's OS images (active, passive, recovery) and the one it booted; installed
	// is the distribution version that image ships (image.go, upgrade.go).
	images    nodeImages
	installed string
	// kubeletClient is the kubelet's client (its own credentials), kept across reboots.
	kubeletClient kubernetes.Interface
	// upgrading serializes upgrades and reboots.
	upgrading sync.Mutex
	// imageReboots counts the reboots of the document's image step.
	imageReboots atomic.Int32
	// upgrades counts the upgrades of the active system the node ran (Upgrade).
	upgrades atomic.Int32
	// dataVersion is the distribution version that last ran on the node (its data directory's),
	// what the version skew policy compares a new image with.
	dataVersion string
	// grub is GRUB's boot assessment state; armed tells that the document's arm step armed it
	// during the last boot of the active image, upgradeFailure that the last boot was GRUB's
	// fallback entry (bootassessment.go).
	grub           grubEnv
	armed          bool
	upgradeFailure bool
	// snaps records the node's etcd snapshots (snapshots.go).
	snaps snapshotState
}

// kubeletRun is a running kubelet heartbeat loop.
type kubeletRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newNode(r *Registry, spec NodeSpec, root, ip string) *Node {
	return &Node{
		reg: r, spec: spec, root: root, ip: ip, machineID: randomHex(16),
		status: Status{Phase: PhaseBooting, Reason: ReasonBooting, Message: "loading the bootstrap data"},
		done:   make(chan struct{}),
	}
}

// IP is the node's address.
func (n *Node) IP() string { return n.ip }

// ProviderID is the node's provider ID.
func (n *Node) ProviderID() string { return n.spec.ProviderID }

// Spec returns what the node was started with.
func (n *Node) Spec() NodeSpec { return n.spec }

// Root is the node's root directory: the files its document writes are below it.
func (n *Node) Root() string { return n.root }

// Status returns the node's current status.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status
}

// Name returns the node name, once known.
func (n *Node) Name() string { return n.Status().NodeName }

// Cluster returns the workload cluster the node started or joined, or nil.
func (n *Node) Cluster() *Cluster {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cluster
}

// Distribution and Role tell what the node's document made of it (empty before it is loaded).
func (n *Node) Distribution() render.Distribution {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.plan == nil {
		return ""
	}
	return n.plan.distribution
}

// Role is the node's role: control-plane or worker.
func (n *Node) Role() render.Role {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.plan == nil {
		return ""
	}
	return n.plan.role
}

// Files returns the files the node's document writes, by path, as the node wrote them.
func (n *Node) Files() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]string{}
	if n.plan != nil {
		for k, v := range n.plan.files {
			out[k] = v
		}
	}
	return out
}

// ReadFile reads a file of the node by its path on the node.
func (n *Node) ReadFile(path string) ([]byte, error) {
	return os.ReadFile(n.hostPath(path))
}

// SentinelExists tells whether the node wrote the Cluster API bootstrap sentinel.
func (n *Node) SentinelExists() bool {
	_, err := os.Stat(n.hostPath(sentinelPath))
	return err == nil
}

func (n *Node) hostPath(path string) string {
	return filepath.Join(n.root, filepath.Clean("/"+path))
}

func (n *Node) setStatus(s Status) {
	n.mu.Lock()
	if n.status.Phase == PhaseStopped {
		n.mu.Unlock()
		return
	}
	s.NodeName = n.status.NodeName
	s.Sentinel = n.status.Sentinel
	changed := s != n.status
	n.status = s
	n.mu.Unlock()
	if changed {
		n.reg.log.V(1).Info("Node status", "providerID", n.spec.ProviderID, "phase", s.Phase, "reason", s.Reason, "message", s.Message)
		n.reg.notify(n.event())
	}
}

func (n *Node) event() NodeEvent {
	return NodeEvent{Namespace: n.spec.Namespace, Name: n.spec.Name, Pool: n.spec.Pool, ProviderID: n.spec.ProviderID}
}

func (n *Node) start() {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		n.run(ctx)
	}()
}

func (n *Node) stop() {
	if n.cancel != nil {
		n.cancel()
		<-n.done
	}
	n.snaps.wg.Wait()
	n.stopKubelet()
	// The machine is gone: so is its etcd process. Its membership stays until someone removes
	// it, as with a real machine that is switched off.
	if e := n.etcdServer(); e != nil {
		e.shutdown(0)
	}
	n.dropVIP()
	n.mu.Lock()
	wasServer := n.etcd != nil
	changed := n.status.Phase != PhaseStopped
	n.status.Phase, n.status.Reason, n.status.Message = PhaseStopped, ReasonStopped, "the machine was deleted"
	n.mu.Unlock()
	// The cluster's API server runs once per simulated cluster, but in reality on its
	// control-plane nodes: once the last of them is gone, so is the cluster (a single-node site
	// that lost its node), and only a node that creates it again (from a snapshot) brings it back.
	if c := n.Cluster(); wasServer && c != nil && !n.reg.serverRunning(c.endpoint) {
		n.reg.log.Info("The last control-plane node of the cluster is gone: stopping its API server", "endpoint", c.endpoint)
		c.Stop()
	}
	if changed {
		n.reg.notify(n.event())
	}
}

// transient is a failure the node retries, as systemd restarts a failing service.
type transient struct {
	reason string
	err    error
}

func (t *transient) Error() string { return t.err.Error() }

func retry(reason string, format string, args ...any) error {
	return &transient{reason: reason, err: fmt.Errorf(format, args...)}
}

// run is the node's life: load the document, write its files, pass the preflight, start or
// join the distribution (retrying), then write the sentinel.
func (n *Node) run(ctx context.Context) {
	p, err := parseDocument(n.spec.Data, n.machineID)
	if err != nil {
		n.fail(err)
		return
	}
	name := p.hostname
	if name == "" {
		name = n.spec.Name
	}
	n.mu.Lock()
	n.plan = p
	n.status.NodeName = name
	n.mu.Unlock()
	if p.init || p.role != render.RoleControlPlane {
		n.addressesHidden.Store(false) // only joining servers stall
	}
	if err := n.writeFiles(p.files); err != nil {
		n.fail(retry(ReasonStartFailed, "writing the node's files: %v", err))
		return
	}
	// The network stage runs the pre-commands once (simulated: not executed) and marks them.
	if _, ok := p.files[render.PreCommandsScript]; ok {
		_ = n.writeFile(render.PreCommandsMarker, "")
	}
	installed, err := n.firstImage(p)
	if err != nil {
		n.fail(err)
		return
	}
	// The boot.before stage of the machine's first boot: nothing to clear, nothing verified to
	// arm against (bootassessment.go).
	n.bootedActive(p)
	// The network stage: the document's image step upgrades a node that booted another image
	// and reboots it, before the distribution's first start.
	if installed, err = n.followDocumentImage(p, installed); err != nil {
		n.fail(err)
		return
	}
	if err := p.preflight(installed); err != nil {
		n.fail(err)
		return
	}

	backoff := time.Second
	for {
		err := n.boot(ctx, p, name, installed)
		if err == nil {
			break
		}
		n.mu.Lock()
		n.bootFailures = append(n.bootFailures, err.Error())
		n.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		var r *refusal
		if errors.As(err, &r) {
			n.fail(err)
			return
		}
		reason := ReasonStartFailed
		var t *transient
		if errors.As(err, &t) {
			reason = t.reason
		}
		n.setStatus(Status{Phase: PhaseBooting, Reason: reason, Message: err.Error()})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 4*time.Second {
			backoff *= 2
		}
	}

	n.mu.Lock()
	n.dataVersion = installed
	n.mu.Unlock()
	// The document's verify step: the distribution is ready, the release is verified.
	n.distributionReady(p)

	// kairos-capi-bootstrap.service: wait for the service, run the post-commands (simulated),
	// write the sentinel.
	if !p.startsBootstrapUnit() {
		n.setStatus(Status{Phase: PhaseRunning, Reason: ReasonNoSentinel,
			Message: "the distribution is up, but the document never starts " + render.BootstrapUnit + ", so no bootstrap sentinel is written"})
		return
	}
	if _, ok := p.files[render.PostCommandsScript]; ok {
		_ = n.writeFile(render.PostCommandsMarker, "")
	}
	// A node that restored etcd reports what it restored before the sentinel, as the bootstrap
	// script does, with the rendered script, the host's /bin/sh and the node's kubectl.
	if strings.Contains(p.files[render.BootstrapScript], render.EtcdRestoreReportScript) {
		if _, err := n.runScriptCommand(ctx, p, "/bin/sh "+render.EtcdRestoreReportScript); err != nil {
			n.fail(retry(ReasonStartFailed, "%v", err))
			return
		}
	}
	if err := n.writeFile(sentinelPath, "success\n"); err != nil {
		n.fail(retry(ReasonStartFailed, "writing the sentinel: %v", err))
		return
	}
	// The bootstrap script marks the first bootstrap done (it persists, unlike the sentinel under
	// /run): from then on the preflight no longer pins the version (common/render scripts.go).
	// As its line says: created once when guarded by [ -e ] (its time is the first bootstrap's,
	// which the on-demand snapshot request compares with), touched on every boot otherwise
	// (documents of older releases).
	switch script, marker := p.files[render.BootstrapScript], render.BootstrapDoneMarker; {
	case strings.Contains(script, "[ -e "+marker+" ] || touch "+marker):
		if _, err := os.Stat(n.hostPath(marker)); errors.Is(err, os.ErrNotExist) {
			_ = n.writeFile(marker, "")
		}
	case strings.Contains(script, "touch "+marker):
		_ = n.writeFile(marker, "")
	}
	n.mu.Lock()
	n.status.Sentinel = true
	n.mu.Unlock()
	n.setStatus(Status{Phase: PhaseRunning, Reason: ReasonRunning, Message: fmt.Sprintf("%s %s is up", p.distribution, installed)})
	// The distribution's snapshot schedule (k3s) or the document's timer (k0s) runs from now on.
	n.startSnapshots(ctx, p)
}

func (n *Node) fail(err error) {
	var r *refusal
	if errors.As(err, &r) {
		n.setStatus(Status{Phase: PhaseRefused, Reason: r.reason, Message: r.err.Error()})
		return
	}
	reason := ReasonStartFailed
	var t *transient
	if errors.As(err, &t) {
		reason = t.reason
	}
	n.setStatus(Status{Phase: PhaseRefused, Reason: reason, Message: err.Error()})
}

func (n *Node) writeFiles(files map[string]string) error {
	for path, content := range files {
		if err := n.writeFile(path, content); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) writeFile(path, content string) error {
	p := n.hostPath(path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o600)
}

// boot starts or joins the distribution once.
func (n *Node) boot(ctx context.Context, p *plan, name, installed string) error {
	switch {
	case p.role == render.RoleControlPlane && p.init:
		return n.bootInit(ctx, p, name, installed)
	case p.role == render.RoleControlPlane:
		return n.bootJoinServer(ctx, p, name, installed)
	case p.distribution == render.K0s:
		return n.bootK0sWorker(ctx, p, name, installed)
	default:
		return n.bootK3sAgent(ctx, p, name, installed)
	}
}

// checkEndpoint makes sure a server serves the endpoint of its machine's cluster: bootstrap data
// rendered for another endpoint would leave the cluster unreachable. Behind a load balancer
// (NodeSpec.APIBackendPort) the API server must listen on the port the balancer forwards to,
// and k0s must send its clients to the endpoint's port, not to the port it listens on.
func (n *Node) checkEndpoint(p *plan) error {
	s, err := p.apiServing()
	if err != nil {
		return err
	}
	host, portText, err := net.SplitHostPort(n.spec.Endpoint)
	if err != nil {
		return fmt.Errorf("the machine's cluster endpoint %q: %w", n.spec.Endpoint, err)
	}
	port, _ := strconv.Atoi(portText)
	if s.host != host {
		return refuse(ReasonBootstrapDataRefused, "the document serves the API at host %s, but the machine's cluster endpoint is %s", s.host, n.spec.Endpoint)
	}
	if s.advertisedPort != 0 && s.advertisedPort != port {
		return refuse(ReasonBootstrapDataRefused, "k0s would send its clients to %s, but the cluster endpoint is %s (set spec.api.externalAddress to host:port)",
			net.JoinHostPort(host, strconv.Itoa(s.advertisedPort)), n.spec.Endpoint)
	}
	backend := n.spec.APIBackendPort
	if backend == 0 {
		backend = port
	}
	if s.listenPort != backend {
		return refuse(ReasonBootstrapDataRefused, "the API server listens on port %d, but the cluster endpoint %s forwards to port %d on the control-plane nodes", s.listenPort, n.spec.Endpoint, backend)
	}
	return nil
}

func (n *Node) bootInit(ctx context.Context, p *plan, name, installed string) error {
	if err := n.checkEndpoint(p); err != nil {
		return err
	}
	cp, err := readPKI(p)
	if err != nil {
		return err
	}
	e, err := n.ensureEtcd(p, name, cp.etcdCA)
	if err != nil {
		return err
	}
	// The document's restore (ExecStartPre of the distribution's unit) runs before etcd starts.
	if err := n.runEtcdRestore(ctx, p); err != nil {
		return err
	}
	c, err := n.reg.initCluster(ctx, n.spec.Endpoint, p, cp, e)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return err
		}
		return retry(ReasonStartFailed, "starting the API server: %v", err)
	}
	if n.spec.FailFirstInitAfterAPIServer && n.injectedInitFailure.CompareAndSwap(false, true) {
		return retry(ReasonStartFailed, "injected transient failure after the API server started")
	}
	return n.startServer(ctx, c, p, name, installed)
}

func (n *Node) bootJoinServer(ctx context.Context, p *plan, name, installed string) error {
	if err := n.checkEndpoint(p); err != nil {
		return err
	}
	t, err := p.token()
	if err != nil {
		return err
	}
	var c *Cluster
	if p.distribution == render.K0s {
		info, err := parseK0sJoinToken(t)
		if err != nil {
			return refuse(ReasonBootstrapDataRefused, "the controller join token: %v", err)
		}
		if !info.controller {
			return refuse(ReasonJoinFailed, "the join token is a %s token: a controller needs a controller token", info.role())
		}
		joinAPI, err := serverURLEndpoint(info.server)
		if err != nil {
			return refuse(ReasonBootstrapDataRefused, "the controller join token: %v", err)
		}
		host, _, _ := net.SplitHostPort(n.spec.Endpoint)
		if joinAPI != net.JoinHostPort(host, fmt.Sprint(k0sJoinAPIPort)) {
			return retry(ReasonWaitingForControlPlane, "no k0s join API answers at %s (the cluster's controllers serve it at %s)", joinAPI, net.JoinHostPort(host, fmt.Sprint(k0sJoinAPIPort)))
		}
		if c = n.runningCluster(n.spec.Endpoint); c == nil {
			return retry(ReasonWaitingForControlPlane, "no k0s join API answers at %s yet", joinAPI)
		}
		if !sameCertificates(info.caCert, c.pki.serverCA.Cert) {
			return retry(ReasonJoinFailed, "x509: the join API's certificate is not signed by the join token's %s", describeCA(info.caCert))
		}
		if err := c.k0sJoinAPI(ctx, info.token); err != nil {
			return retry(ReasonJoinFailed, "%v", err)
		}
	} else {
		ep, err := serverURLEndpoint(p.flags.value("server"))
		if err != nil {
			return refuse(ReasonBootstrapDataRefused, "--server: %v", err)
		}
		if c = n.runningCluster(ep); c == nil {
			return retry(ReasonWaitingForControlPlane, "no k3s server answers at %s yet", ep)
		}
		if err := c.k3sServerJoin(t); err != nil {
			return retry(ReasonJoinFailed, "%v", err)
		}
		agent, err := p.agentToken()
		if err != nil {
			return err
		}
		if err := c.k3sCheckServerAgentToken(t, agent); err != nil {
			return err
		}
	}
	if ca := joinerCA(p); len(ca) > 0 && !sameCertificates(ca, c.pki.serverCA.Cert) {
		return refuse(ReasonBootstrapDataRefused, "the node was given %s, but the cluster runs with %s", describeCA(ca), describeCA(c.pki.serverCA.Cert))
	}
	return n.startServer(ctx, c, p, name, installed)
}

// runningCluster returns the cluster serving an endpoint, or nil.
func (n *Node) runningCluster(endpoint string) *Cluster {
	c := n.reg.Cluster(endpoint)
	if c == nil || !c.Running() || !c.reachable() {
		return nil
	}
	return c
}

// startServer runs a control-plane node on its cluster: etcd membership, kubelet (when the
// controller runs one), manifests.
func (n *Node) startServer(ctx context.Context, c *Cluster, p *plan, name, installed string) error {
	n.mu.Lock()
	n.cluster = c
	n.mu.Unlock()

	labels := map[string]string{"node-role.kubernetes.io/control-plane": "true"}
	var taints []taint
	var err error
	runsKubelet := true
	if !p.init {
		ca := c.pki.etcdCA
		if own, err := readPKI(p); err == nil {
			ca = own.etcdCA
		}
		e, err := n.ensureEtcd(p, name, ca)
		if err != nil {
			return err
		}
		if err := c.joinEtcd(ctx, e); err != nil {
			return retry(ReasonStartFailed, "joining etcd: %v", err)
		}
	}
	if p.distribution == render.K0s {
		runsKubelet = p.flags.bool("enable-worker") || p.flags.bool("single")
		if !p.flags.bool("no-taints") && !p.flags.bool("single") {
			taints = append(taints, taint{key: "node-role.kubernetes.io/control-plane", effect: "NoSchedule"})
		}
		if err := c.joinK0sEtcd(ctx, n.etcdServer()); err != nil {
			return retry(ReasonStartFailed, "publishing the EtcdMember: %v", err)
		}
	} else {
		labels["node-role.kubernetes.io/master"] = "true"
		if c.k3sEtcd {
			labels[K3sEtcdRoleLabel] = "true"
		}
	}
	if !p.init {
		if err := n.stallWhileHeld(ctx); err != nil {
			return err
		}
	}
	extra, err := n.roleLabelsAndTaints(p)
	if err != nil {
		return err
	}
	for k, v := range extra.labels {
		labels[k] = v
	}
	taints = append(taints, extra.taints...)

	if runsKubelet {
		kp, err := c.issueClientCert("system:node:"+name, []string{"system:nodes"})
		if err != nil {
			return retry(ReasonStartFailed, "issuing the kubelet certificate: %v", err)
		}
		if err := n.register(ctx, c, c.configFor(c.pki.serverCA.Cert, kp), name, kubeletProviderID(c, p, name), installed, labels, taints); err != nil {
			return err
		}
		if p.distribution == render.K3s && c.k3sEtcd {
			if err := n.annotateK3sMember(ctx, c, name, n.etcdServer()); err != nil {
				return retry(ReasonStartFailed, "publishing the etcd member: %v", err)
			}
		}
	}
	if err := c.applyManifests(ctx, p); err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return err
		}
		return retry(ReasonStartFailed, "%v", err)
	}
	// The admin kubeconfig the distribution writes on its servers, which its kubectl reads.
	kubeconfig, err := framework.Kubeconfig(c.config)
	if err != nil {
		return retry(ReasonStartFailed, "%v", err)
	}
	if err := n.writeFile(adminKubeconfigPath(p.distribution), string(kubeconfig)); err != nil {
		return retry(ReasonStartFailed, "writing the admin kubeconfig: %v", err)
	}
	if c.vip != nil {
		host, _, _ := net.SplitHostPort(c.endpoint)
		holds, err := p.holdsVIP(host)
		if err != nil {
			return err
		}
		if holds {
			if err := c.vip.join(n); err != nil {
				return retry(ReasonStartFailed, "%v", err)
			}
		}
	}
	return nil
}

// stallWhileHeld holds a joined server before its kubelet starts while the registry holds its
// namespace's server starts.
func (n *Node) stallWhileHeld(ctx context.Context) error {
	defer n.addressesHidden.Store(false)
	defer n.stalled.Store(false)
	for n.addressesHidden.Load() && n.reg.serverStartsHeld(n.spec.Namespace) {
		if !n.stalled.Swap(true) {
			n.setStatus(Status{Phase: PhaseBooting, Reason: ReasonBooting, Message: "joined etcd; the kubelet and the guest agent are not up yet"})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// Stalled tells whether the node stalls after joining etcd, before its kubelet and guest agent
// are up (Registry.HoldServerStarts).
func (n *Node) Stalled() bool { return n.stalled.Load() }

// AddressesHidden tells that the node's machine has no address to report yet: it was started
// while its namespace's server starts were held, and has not passed the stall (or is no joining
// server, which never stalls: then from its plan on).
func (n *Node) AddressesHidden() bool { return n.addressesHidden.Load() }

// annotateK3sMember records a k3s server's etcd member on its Node, as k3s does.
func (n *Node) annotateK3sMember(ctx context.Context, c *Cluster, name string, m *etcdServer) error {
	// The kubelet posts the Node's status meanwhile: read, change and write again on a conflict,
	// as k3s' own node annotation updates do (client-go's retry.RetryOnConflict).
	return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := c.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[K3sNodeNameAnnotation] = m.name
		node.Annotations[K3sNodeAddressAnnotation] = m.ip
		if !containsString(node.Finalizers, K3sEtcdFinalizer) {
			node.Finalizers = append(node.Finalizers, K3sEtcdFinalizer)
		}
		return c.client.Update(ctx, node)
	})
}

type labelsAndTaints struct {
	labels map[string]string
	taints []taint
}

// roleLabelsAndTaints reads the node labels and taints the distribution's args ask for.
func (n *Node) roleLabelsAndTaints(p *plan) (labelsAndTaints, error) {
	labelFlag, taintFlag := "labels", "taints"
	if p.distribution == render.K3s {
		labelFlag, taintFlag = "node-label", "node-taint"
	}
	labels, err := parseLabels(p.flags.list(labelFlag))
	if err != nil {
		return labelsAndTaints{}, refuse(ReasonBootstrapDataRefused, "--%s: %v", labelFlag, err)
	}
	taints, err := parseTaints(p.flags.list(taintFlag))
	if err != nil {
		return labelsAndTaints{}, refuse(ReasonBootstrapDataRefused, "--%s: %v", taintFlag, err)
	}
	return labelsAndTaints{labels: labels, taints: taints}, nil
}

func (n *Node) bootK0sWorker(ctx context.Context, p *plan, name, installed string) error {
	t, err := p.token()
	if err != nil {
		return err
	}
	info, err := parseK0sJoinToken(t)
	if err != nil {
		return refuse(ReasonBootstrapDataRefused, "the worker join token: %v", err)
	}
	if info.controller {
		return refuse(ReasonJoinFailed, "the join token is a %s token: a worker needs a worker token", info.role())
	}
	ep, err := serverURLEndpoint(info.server)
	if err != nil {
		return refuse(ReasonBootstrapDataRefused, "the worker join token: %v", err)
	}
	c := n.runningCluster(ep)
	if c == nil {
		return retry(ReasonWaitingForControlPlane, "no API server answers at %s yet", info.server)
	}
	// The kubelet's TLS bootstrap, with the join token's kubeconfig: it trusts the token's CA
	// and authenticates with the bootstrap token. The workload kube-apiserver runs with
	// --enable-bootstrap-token-auth: its own authenticator answers 401 when the token's
	// bootstrap-token-<id> Secret is missing (the token cleaner removed it), expired or holds
	// another secret, as for a real kubelet, so nothing here re-checks the token.
	bootstrap := &rest.Config{Host: info.server, BearerToken: info.token.String(), TLSClientConfig: rest.TLSClientConfig{CAData: info.caCert}, Timeout: 10 * time.Second}
	kube, err := kubernetes.NewForConfig(bootstrap)
	if err != nil {
		return refuse(ReasonBootstrapDataRefused, "the worker join token: %v", err)
	}
	csrPEM, keyPEM, err := newKubeletCSR(name)
	if err != nil {
		return retry(ReasonStartFailed, "creating the kubelet key: %v", err)
	}
	csr, err := kube.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrPEM,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return retry(ReasonJoinFailed, "the API server refused the kubelet's bootstrap credentials: %v", err)
	}
	if want := "system:bootstrap:" + info.token.id; csr.Spec.Username != want || !containsString(csr.Spec.Groups, "system:bootstrappers") {
		return retry(ReasonJoinFailed, "the API server saw the kubelet as %s %v, not as %s", csr.Spec.Username, csr.Spec.Groups, want)
	}
	if err := c.approveNodeCSR(ctx, csr.Name); err != nil {
		return retry(ReasonJoinFailed, "the kubelet's certificate request was not approved: %v", err)
	}
	csr, err = kube.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
	if err != nil {
		return retry(ReasonJoinFailed, "reading the kubelet certificate: %v", err)
	}
	if len(csr.Status.Certificate) == 0 {
		return retry(ReasonJoinFailed, "the kubelet's certificate request %s has no certificate", csr.Name)
	}
	kubelet := &rest.Config{Host: info.server, TLSClientConfig: rest.TLSClientConfig{CAData: info.caCert, CertData: csr.Status.Certificate, KeyData: keyPEM}}
	extra, err := n.roleLabelsAndTaints(p)
	if err != nil {
		return err
	}
	if err := n.register(ctx, c, kubelet, name, kubeletProviderID(c, p, name), installed, extra.labels, extra.taints); err != nil {
		return err
	}
	return n.writeFile("/var/lib/k0s/kubelet.conf", "# kubelet client certificate issued by "+csr.Name+"\n")
}

func (n *Node) bootK3sAgent(ctx context.Context, p *plan, name, installed string) error {
	t, err := p.token()
	if err != nil {
		return err
	}
	server := p.flags.value("server")
	ep, err := serverURLEndpoint(server)
	if err != nil {
		return refuse(ReasonBootstrapDataRefused, "--server: %v", err)
	}
	c := n.runningCluster(ep)
	if c == nil {
		return retry(ReasonWaitingForControlPlane, "no k3s server answers at %s yet", server)
	}
	if err := c.k3sAgentJoin(t); err != nil {
		return retry(ReasonJoinFailed, "%v", err)
	}
	// The supervisor issues the agent's kubelet client certificate.
	kp, err := c.issueClientCert("system:node:"+name, []string{"system:nodes"})
	if err != nil {
		return retry(ReasonStartFailed, "issuing the kubelet certificate: %v", err)
	}
	extra, err := n.roleLabelsAndTaints(p)
	if err != nil {
		return err
	}
	if err := n.register(ctx, c, c.configFor(c.pki.serverCA.Cert, kp), name, kubeletProviderID(c, p, name), installed, extra.labels, extra.taints); err != nil {
		return err
	}
	return n.writeFile("/var/lib/rancher/k3s/agent/kubelet.kubeconfig", "# kubelet client certificate issued by the supervisor\n")
}

// kubeletProviderID is the provider ID a node's Node gets from its document, as real k0s and
// k3s nodes would give it: the kubelet's --provider-id when the document passes one (k0s
// --kubelet-extra-args, k3s --kubelet-arg); otherwise none with k0s, which runs no cloud
// controller, and k3s://<node name> with k3s while its servers run the embedded cloud
// controller (k3s pkg/cloudprovider, InstanceMetadata), none once they were started with
// --disable-cloud-controller. The machine's infrastructure ID never reaches the Node by
// itself: that is for the bootstrap data or a controller to arrange.
func kubeletProviderID(c *Cluster, p *plan, name string) string {
	if p.distribution == render.K0s {
		fields := strings.Fields(strings.Join(p.flags.list("kubelet-extra-args"), " "))
		for i, f := range fields {
			if v, ok := strings.CutPrefix(f, "--provider-id="); ok {
				return v
			}
			if f == "--provider-id" && i+1 < len(fields) {
				return fields[i+1]
			}
		}
		return ""
	}
	for _, a := range p.flags.list("kubelet-arg") {
		if v, ok := strings.CutPrefix(a, "provider-id="); ok {
			return v
		}
	}
	if c.k3sCCM {
		return "k3s://" + name
	}
	return ""
}

// register creates the node's Node object with the kubelet's own credentials (the Node
// authorizer lets a kubelet create and update only its own Node), then reports it Ready.
// A kubelet that registers again keeps the provider ID its Node was given, and refuses a Node
// of its name that carries another machine's.
func (n *Node) register(ctx context.Context, c *Cluster, kubelet *rest.Config, name, providerID, installed string, labels map[string]string, taints []taint) error {
	kube, err := kubernetes.NewForConfig(kubelet)
	if err != nil {
		return retry(ReasonStartFailed, "kubelet client: %v", err)
	}
	all := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}
	for k, v := range labels {
		all[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
	}
	for _, t := range taints {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: t.key, Value: t.value, Effect: corev1.TaintEffect(t.effect)})
	}
	created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return retry(ReasonStartFailed, "reading the existing Node %s: %v", name, gerr)
		}
		if providerID != "" && existing.Spec.ProviderID != "" && existing.Spec.ProviderID != providerID {
			return retry(ReasonStartFailed, "a Node %s already exists for %s", name, existing.Spec.ProviderID)
		}
		if existing.Spec.ProviderID == "" {
			existing.Spec.ProviderID = providerID
		}
		existing.Labels, existing.Spec.Taints = all, node.Spec.Taints
		created, err = kube.CoreV1().Nodes().Update(ctx, existing, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return retry(ReasonJoinFailed, "registering the Node: %v", err)
		}
		return retry(ReasonStartFailed, "registering the Node: %v", err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: n.machineID, SystemUUID: n.spec.SystemUUID, BootID: randomHex(16),
			KubeletVersion: kubeletVersion(installed), OSImage: n.osImage(), KernelVersion: "6.6.0-kairos-sim",
			OperatingSystem: "linux", Architecture: "amd64", ContainerRuntimeVersion: "containerd://2.0.0-sim",
		},
		Capacity:    nodeResources(),
		Allocatable: nodeResources(),
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return retry(ReasonStartFailed, "reporting the Node status: %v", err)
	}
	n.mu.Lock()
	n.cluster = c
	n.kubeletClient = kube
	n.mu.Unlock()
	n.startKubelet(kube, name)
	return nil
}

// startKubelet runs the node's kubelet heartbeats, with the kubelet's own credentials (the API
// server's Node authorizer lets a kubelet write only its own Lease and Node status): it renews
// the Node's Lease every NodeLeaseRenewInterval and posts its Ready condition whenever the Node
// says otherwise than the kubelet sees (a Node the node lifecycle controller marked Unknown
// while the kubelet was away turns Ready again once it is back).
func (n *Node) startKubelet(kube kubernetes.Interface, name string) {
	n.stopKubelet()
	ctx, cancel := context.WithCancel(context.Background())
	run := &kubeletRun{cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	n.kubelet = run
	n.mu.Unlock()
	go func() {
		defer close(run.done)
		for {
			n.heartbeat(ctx, kube, name)
			select {
			case <-ctx.Done():
				return
			case <-time.After(NodeLeaseRenewInterval):
			}
		}
	}()
}

// stopKubelet stops the node's kubelet: from then on nothing renews its Lease or posts its
// status, as when the machine is switched off or deleted.
func (n *Node) stopKubelet() {
	n.mu.Lock()
	run := n.kubelet
	n.kubelet = nil
	n.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// heartbeat is one round of the kubelet's: renew the Lease, post the Ready condition if the Node
// disagrees. Failures are retried at the next round, as the kubelet does.
func (n *Node) heartbeat(ctx context.Context, kube kubernetes.Interface, name string) {
	// A round that cannot finish in time is cut off: the next one tries again.
	ctx, cancel := context.WithTimeout(ctx, NodeLeaseRenewInterval)
	defer cancel()
	now := metav1.NewMicroTime(time.Now())
	duration := int32(nodeLeaseDuration / time.Second)
	leases := kube.CoordinationV1().Leases(nodeLeaseNamespace)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		if node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}
		}
		_, _ = leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &name, &duration, &now
		_, _ = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}

	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	want := n.readyCondition()
	for i, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == want.Status && c.Reason == want.Reason {
			return
		}
		want.LastHeartbeatTime, want.LastTransitionTime = metav1.Now(), metav1.Now()
		node.Status.Conditions[i] = want
		_, _ = kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return
	}
}

// readyCondition is the Ready condition the kubelet reports.
func (n *Node) readyCondition() corev1.NodeCondition {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.notReady != nil {
		return *n.notReady
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
}

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	}
}

// SetReady sets the Ready condition of the node's Node, as a kubelet that stops (or resumes)
// posting ready status would; use it to make a Machine unhealthy for a MachineHealthCheck.
func (n *Node) SetReady(ctx context.Context, ready bool, message string) error {
	var notReady *corev1.NodeCondition
	if !ready {
		if message == "" {
			message = "container runtime is down (simulated failure)"
		}
		notReady = &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: message}
	}
	// The kubelet keeps reporting what it sees from now on; the first report is sent now.
	n.mu.Lock()
	n.notReady = notReady
	n.mu.Unlock()
	return n.SetNodeCondition(ctx, n.readyCondition())
}

// SetNodeCondition sets one condition of the node's Node status.
func (n *Node) SetNodeCondition(ctx context.Context, cond corev1.NodeCondition) error {
	c := n.Cluster()
	name := n.Name()
	if c == nil || name == "" {
		return fmt.Errorf("node %s has not joined a cluster", n.spec.ProviderID)
	}
	for attempt := 0; ; attempt++ {
		node := &corev1.Node{}
		if err := c.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		now := metav1.Now()
		cond.LastHeartbeatTime = now
		found := false
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == cond.Type {
				cond.LastTransitionTime = node.Status.Conditions[i].LastTransitionTime
				if node.Status.Conditions[i].Status != cond.Status {
					cond.LastTransitionTime = now
				}
				node.Status.Conditions[i] = cond
				found = true
			}
		}
		if !found {
			cond.LastTransitionTime = now
			node.Status.Conditions = append(node.Status.Conditions, cond)
		}
		err := c.client.Status().Update(ctx, node)
		if err == nil || !apierrors.IsConflict(err) || attempt > 5 {
			return err
		}
	}
}

// RunCloudNodeController does for the node's Node what an infrastructure provider's cloud
// controller manager does for a Node that registered without a provider ID (k8s.io/cloud-provider
// cloud-node controller): it writes the machine's provider ID, id. A Node that has one keeps
// it, as the API server never changes a provider ID once set. Infrastructure whose nodes
// share one bootstrap document (machine pools) relies on it in reality.
func (n *Node) RunCloudNodeController(ctx context.Context, id string) error {
	c := n.Cluster()
	name := n.Name()
	if c == nil || name == "" {
		return nil // not registered yet
	}
	node := &corev1.Node{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return client.IgnoreNotFound(err)
	}
	if node.Spec.ProviderID != "" {
		return nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.ProviderID = id
	return c.client.Patch(ctx, node, patch)
}

// BootFailures are the errors of the node's failed attempts to start or join its distribution,
// in order.
func (n *Node) BootFailures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.bootFailures)
}

// etcdServer returns the node's etcd member, or nil.
func (n *Node) etcdServer() *etcdServer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.etcd
}

// ensureEtcd prepares the node's etcd member once: a retried boot keeps it (and its data). k0s
// names the member after the node (its hostname); k3s after the node with a dash and eight hex
// digits (k3s pkg/etcd/etcd.go).
func (n *Node) ensureEtcd(p *plan, name string, ca pki.KeyPair) (*etcdServer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.etcd != nil {
		return n.etcd, nil
	}
	member, exposed := name, true
	if p.distribution == render.K3s {
		member = name + "-" + randomHex(4)
	} else {
		var err error
		if exposed, err = k0sServesEtcdOnNodeAddress(p, n.ip); err != nil {
			return nil, err
		}
	}
	e, err := newEtcdServer(n, member, ca, exposed)
	if err != nil {
		return nil, retry(ReasonStartFailed, "preparing etcd: %v", err)
	}
	n.etcd = e
	return e, nil
}

// KillEtcd kills the node's etcd process, as a crashed or OOM-killed etcd: the node's kubelet
// keeps reporting Ready and the distribution's objects (EtcdMember, Node annotations) keep
// saying the member joined. It stays down until StartEtcd. A killed leader leaves its peers
// without a leader until they elect one (StopEtcd does not).
func (n *Node) KillEtcd() error { return n.haltEtcd(0) }

// StopEtcd stops the node's etcd process as an operator or init system does (SIGTERM): a leader
// hands its leadership over before it goes. Otherwise as KillEtcd.
func (n *Node) StopEtcd() error { return n.haltEtcd(rebootStopGrace) }

func (n *Node) haltEtcd(grace time.Duration) error {
	e := n.etcdServer()
	if e == nil {
		return errNoEtcd
	}
	e.stop(grace)
	return nil
}

// PartitionEtcd cuts the node's etcd member off its peers (cut) or heals the cut: no raft
// message crosses between it and any other member, in either direction, as behind a firewall
// that drops the etcd peer port (2380). The member keeps running and answering on its client
// port, without a leader; its kubelet stays Ready.
func (n *Node) PartitionEtcd(cut bool) error {
	e := n.etcdServer()
	if e == nil {
		return errNoEtcd
	}
	n.reg.peers.setCut(e.key(), cut)
	if c := n.Cluster(); cut && c != nil && c.etcdLB != nil {
		c.etcdLB.breakTo(e.local)
	}
	return nil
}

// PowerOff switches the machine off without warning: its etcd member stops and nothing listens
// on its addresses any more; its membership stays, as with a real machine that lost power. Its
// kubelet stops renewing its Lease, so the cluster's node lifecycle controller marks the Node
// Unknown once its grace period passed (reason NodeStatusUnknown), as in reality.
func (n *Node) PowerOff(context.Context) error {
	if e := n.etcdServer(); e != nil {
		e.shutdown(0)
	}
	n.dropVIP()
	n.stopKubelet()
	return nil
}

// dropVIP gives up the node's part in holding its cluster's virtual IP: it no longer runs.
func (n *Node) dropVIP() {
	if c := n.Cluster(); c != nil && c.vip != nil {
		c.vip.leave(n)
	}
}

// StartEtcd restarts the node's etcd process with its data, as systemd or the distribution's
// supervisor restarting it: it rejoins as the same member.
func (n *Node) StartEtcd() error {
	e := n.etcdServer()
	if e == nil {
		return errNoEtcd
	}
	e.mu.Lock()
	removed := e.removed
	e.mu.Unlock()
	if removed {
		return fmt.Errorf("the etcd member %s was removed from the cluster", e.name)
	}
	if err := e.run(); err != nil {
		return err
	}
	return e.waitServing(context.Background(), 30*time.Second)
}

// String describes the node for test messages.
func (n *Node) String() string {
	s := n.Status()
	return fmt.Sprintf("node %s (%s): %s/%s: %s", n.spec.ProviderID, s.NodeName, s.Phase, s.Reason, strings.TrimSpace(s.Message))
}
