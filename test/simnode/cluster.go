package simnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// Cluster is a simulated workload cluster: a real etcd and kube-apiserver listening on the
// cluster endpoint, started by the first control-plane node with the PKI it was given, and the
// parts of k0s / k3s that joining nodes talk to (k0s' join API, the k3s supervisor, the
// controller-manager's CSR approval and signing), simulated in-process.
type Cluster struct {
	reg          *Registry
	endpoint     string
	distribution render.Distribution
	dir          string
	pki          *clusterPKI

	// k3sPasswd is the supervisor's passwd file, written by the init server from its token and
	// agent token; k3sEtcd tells whether the cluster runs embedded etcd (--cluster-init).
	k3sPasswd k3sPasswd
	k3sEtcd   bool
	// k3sBootstrapKey is the etcd key of the init server's bootstrap data (k3sBootstrapKey of
	// its token).
	k3sBootstrapKey string
	// k3sCCM tells whether the servers run k3s' embedded cloud controller, which gives every
	// Node of the cluster, servers' and agents', the provider ID k3s://<node name>.
	k3sCCM bool
	// single is k0s --single: the controller refuses every join.
	single bool

	apiserver *process
	// controllerManager runs kube-controller-manager's node lifecycle controller, as every real
	// control plane does: it marks a Node whose kubelet stopped renewing its Lease Unknown.
	controllerManager *process
	// apiAddr is host:port of the kube-apiserver: the endpoint, except behind a virtual IP.
	apiAddr string
	// vip, when the endpoint is a virtual IP, serves the endpoint while a control-plane node
	// that holds the address runs.
	vip    *vipEndpoint
	config *rest.Config
	client client.Client
	kube   kubernetes.Interface

	// init is the node that started the cluster: its retried boots reuse the cluster.
	init *Node
	// etcdLB is how the API server reaches etcd: any member that accepts connections.
	etcdLB         *etcdBalancer
	etcdClientOnce sync.Once
	etcdCli        *clientv3.Client
	etcdClientErr  error

	crdOnce sync.Once
	crdErr  error

	// leavesHeld stops the distribution from acting on etcd leave requests (HoldLeaveRequests).
	leavesHeld atomic.Bool
	// upgradesHeld stops the Kairos operator from reporting a node's upgrade done
	// (HoldUpgradeCompletion).
	upgradesHeld atomic.Bool
	// operator is the Kairos operator, once its CRD is established (watchForKairosOperator);
	// guarded by mu. operatorStarted is closed when it starts.
	operator        *kairosOperator
	operatorStarted chan struct{}

	mu sync.Mutex
	// servers are the control-plane nodes' etcd members, by member name.
	servers map[string]*etcdServer
	stopped bool
	// stopping is closed when Stop begins.
	stopping chan struct{}
	cancel   context.CancelFunc
	// loops are the cluster's background loops (startLoop).
	loops sync.WaitGroup
}

// EtcdMember is one member of a simulated cluster's etcd, as etcd's member list has it.
type EtcdMember struct {
	// Name is the etcd member name: the node name for k0s, <node name>-<8 hex> for k3s; empty
	// for a member that was added but never started.
	Name string
	// NodeName is the Node of the server running the member.
	NodeName string
	// MemberID is the member's id in hex.
	MemberID string
	// PeerAddress is the host of the member's peer URL: its node's address.
	PeerAddress string
	// IsLearner tells a learner (a k3s server that has not caught up yet).
	IsLearner bool
}

// Endpoint is host:port of the cluster's API server.
func (c *Cluster) Endpoint() string { return c.endpoint }

// Distribution is the cluster's distribution.
func (c *Cluster) Distribution() render.Distribution { return c.distribution }

// AdminConfig returns a cluster-admin rest.Config of the workload API server (a client
// certificate of system:masters signed with the cluster CA).
func (c *Cluster) AdminConfig() *rest.Config { return rest.CopyConfig(c.config) }

// AdminClient returns a cluster-admin client of the workload API server.
func (c *Cluster) AdminClient() client.Client { return c.client }

// Running tells whether the API server is up.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.stopped && !c.apiserver.exited()
}

// EtcdMembers lists the current members of the cluster's etcd, by name, as etcd's own member
// list (read with quorum) has them; nil when etcd cannot answer, or when there is no cluster (a
// nil Cluster: TestCluster.SimCluster before the cluster started, or when it could not read the
// Cluster's endpoint). A member that left (k0s EtcdMember spec.leave, k3s
// etcd.k3s.cattle.io/remove) is no longer listed.
func (c *Cluster) EtcdMembers() []EtcdMember {
	if c == nil {
		return nil
	}
	members, err := c.etcdMembers(context.Background())
	if err != nil {
		return nil
	}
	return members
}

// startCluster starts the workload cluster of an init node: its etcd member, then the API
// server. The node's PKI is copied to the cluster's own directory: the server outlives the node.
func (r *Registry) startCluster(ctx context.Context, endpoint string, p *plan, cp *clusterPKI, init *etcdServer) (*Cluster, error) {
	host, portStr, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(r.dir, "cluster-"+portStr+"-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		reg: r, endpoint: endpoint, apiAddr: endpoint, distribution: p.distribution, dir: dir, pki: cp, init: init.node,
		servers: map[string]*etcdServer{}, operatorStarted: make(chan struct{}), stopping: make(chan struct{}),
		single: p.distribution == render.K0s && p.flags.bool("single"),
	}
	if init.node.spec.EndpointIsVIP {
		// The API server listens elsewhere; the endpoint answers only while a node holds it.
		if port, err = freePort(); err != nil {
			return nil, err
		}
		c.apiAddr = net.JoinHostPort(host, strconv.Itoa(port))
		c.vip = newVIPEndpoint(endpoint, c.apiAddr, r.log)
	}
	if p.distribution == render.K3s {
		t, err := p.token()
		if err != nil {
			return nil, err
		}
		if err := checkK3sToken(t, cp.serverCA.Cert); err != nil {
			return nil, refuse(ReasonBootstrapDataRefused, "k3s server token: %v", err)
		}
		agent, err := p.agentToken()
		if err != nil {
			return nil, err
		}
		c.k3sPasswd, c.k3sEtcd = newK3sPasswd(t, agent), p.flags.bool("cluster-init")
		c.k3sBootstrapKey = k3sBootstrapKey(t)
		c.k3sCCM = !p.flags.bool("disable-cloud-controller")
	}
	if err := c.start(ctx, host, port, init); err != nil {
		c.stopProcesses()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) write(name string, data []byte) (string, error) {
	path := filepath.Join(c.dir, name)
	return path, os.WriteFile(path, data, 0o600)
}

// start runs the init node's etcd member and kube-apiserver and waits until the API server is
// ready.
func (c *Cluster) start(ctx context.Context, host string, port int, init *etcdServer) error {
	assets := c.reg.assets
	cp := c.pki
	files := map[string][]byte{
		"client-ca.crt": cp.clientCA.Cert, "server-ca.crt": cp.serverCA.Cert,
		"front-proxy-ca.crt": cp.frontProxyCA.Cert, "etcd-ca.crt": cp.etcdCA.Cert,
		"sa-verify.key": cp.saVerify, "sa-sign.key": cp.saSign,
	}
	issue := []struct {
		name   string
		ca     pki.KeyPair
		server bool
		cn     string
		orgs   []string
		sans   []string
	}{
		{"serving", cp.serverCA, true, "kube-apiserver", nil, []string{
			host, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local", "10.96.0.1"}},
		{"apiserver-etcd-client", cp.etcdCA, false, "kube-apiserver-etcd-client", nil, nil},
		{"front-proxy-client", cp.frontProxyCA, false, "front-proxy-client", nil, nil},
		{"admin", cp.clientCA, false, "kairos-sim-admin", []string{"system:masters"}, nil},
	}
	issued := map[string]*pki.KeyPair{}
	for _, i := range issue {
		var kp *pki.KeyPair
		var err error
		if i.server {
			kp, err = i.ca.SignServer(i.cn, i.sans, 24*time.Hour)
		} else {
			kp, err = i.ca.SignClient(i.cn, i.orgs, 24*time.Hour)
		}
		if err != nil {
			return fmt.Errorf("issuing the %s certificate: %w", i.name, err)
		}
		issued[i.name] = kp
		files[i.name+".crt"], files[i.name+".key"] = kp.Cert, kp.Key
	}
	paths := map[string]string{}
	for name, data := range files {
		path, err := c.write(name, data)
		if err != nil {
			return err
		}
		paths[name] = path
	}

	if err := init.start(init.name+"="+init.peerURL(), "new"); err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	c.addServer(init)
	if err := init.waitServing(ctx, 30*time.Second); err != nil {
		return err
	}
	var err error
	if c.etcdLB, err = newEtcdBalancer(c.memberServers); err != nil {
		return err
	}
	if c.k3sEtcd {
		if err := c.k3sSaveBootstrap(ctx); err != nil {
			return err
		}
	}
	etcdURL := "https://" + c.etcdLB.addr()
	c.apiserver, err = startProcess(c.dir, "kube-apiserver", filepath.Join(assets, "kube-apiserver"), []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=" + host,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file=" + paths["serving.crt"],
		"--tls-private-key-file=" + paths["serving.key"],
		"--client-ca-file=" + paths["client-ca.crt"],
		"--etcd-servers=" + etcdURL,
		"--etcd-cafile=" + paths["etcd-ca.crt"],
		"--etcd-certfile=" + paths["apiserver-etcd-client.crt"],
		"--etcd-keyfile=" + paths["apiserver-etcd-client.key"],
		"--service-account-key-file=" + paths["sa-verify.key"],
		"--service-account-signing-key-file=" + paths["sa-sign.key"],
		"--service-account-issuer=https://kubernetes.default.svc",
		"--requestheader-client-ca-file=" + paths["front-proxy-ca.crt"],
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + paths["front-proxy-client.crt"],
		"--proxy-client-key-file=" + paths["front-proxy-client.key"],
		"--enable-bootstrap-token-auth=true",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.96.0.0/12",
		"--allow-privileged=true",
		"--profiling=false",
		// No watch cache, as framework.Tuned gives the management API server: the same
		// answers, less CPU. With it the API server keeps a LIST and WATCH of every resource
		// open against etcd from its start, most of what a simulated cluster's API server does:
		// measured with the envtest binaries, 2.9 CPU-seconds to start instead of 3.9 and 1.3 %
		// of a core idle instead of 2.4 %; the watches it re-opens whenever its etcd member goes
		// away (a scale-down, a reboot) were a third of its CPU time in a profile of
		// TestHAScaleUpAndDown. The suite starts about a hundred of them.
		"--watch-cache=false",
	})
	if err != nil {
		return err
	}

	admin := issued["admin"]
	c.config = &rest.Config{
		Host: "https://" + c.apiAddr,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cp.serverCA.Cert, CertData: admin.Cert, KeyData: admin.Key,
		},
		QPS: 50, Burst: 100,
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	if c.client, err = client.New(c.config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if c.kube, err = kubernetes.NewForConfig(c.config); err != nil {
		return err
	}
	if err := c.waitReady(ctx, 90*time.Second); err != nil {
		return err
	}
	if err := c.startControllerManager(); err != nil {
		return err
	}
	return c.bootstrap(ctx)
}

// waitReady polls /readyz until it answers ok.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if c.apiserver.exited() {
			return fmt.Errorf("kube-apiserver exited: %v\n%s", c.apiserver.err, c.apiserver.logTail(20))
		}
		if len(c.memberServers()) == 0 {
			return errors.New("no etcd member runs")
		}
		body, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready after %s: %v\n%s", timeout, last, c.apiserver.logTail(20))
}

// Node heartbeats. A kubelet renews its Lease in kube-node-lease every quarter of the lease
// duration (kubelet nodeLeaseDurationSeconds, default 40 s) and posts its Node status when it
// changes; kube-controller-manager's node lifecycle controller marks a Node whose Lease was not
// renewed within its grace period Unknown (--node-monitor-grace-period, 50 s in v1.36) and
// taints it unreachable. The simulation runs both for real, with the periods shortened through
// the same settings, in the same proportions (nothing a scenario needs waits 50 s for it).
// NodeMonitorGracePeriod and NodeLeaseRenewInterval are exported for tests that wait for a Node
// to go Unknown: between grace period minus one renew interval (the last renewal came before the
// kubelet stopped) and grace period plus the monitor period after it stopped.
const (
	nodeLeaseDuration       = 20 * time.Second
	NodeLeaseRenewInterval  = nodeLeaseDuration / 4
	NodeMonitorGracePeriod  = 25 * time.Second
	nodeMonitorPeriod       = 2 * time.Second
	nodeLeaseNamespace      = "kube-node-lease"
	nodeLifecycleController = "node-lifecycle-controller"
)

// startControllerManager runs kube-controller-manager's node lifecycle controller against the
// cluster's API server, with the cluster-admin identity (the simulated distribution's own).
func (c *Cluster) startControllerManager() error {
	kubeconfig, err := framework.Kubeconfig(c.config)
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return err
	}
	c.controllerManager, err = startProcess(c.dir, "kube-controller-manager", filepath.Join(c.reg.assets, "kube-controller-manager"), []string{
		"--kubeconfig=" + path,
		"--controllers=" + nodeLifecycleController,
		"--leader-elect=false",
		"--secure-port=0",
		"--node-monitor-grace-period=" + NodeMonitorGracePeriod.String(),
		"--node-monitor-period=" + nodeMonitorPeriod.String(),
		"--profiling=false",
		"-v=1",
	})
	return err
}

// bootstrap creates what the distribution's first controller creates before anyone joins.
func (c *Cluster) bootstrap(ctx context.Context) error {
	if c.distribution != render.K0s {
		return nil
	}
	// k0s lets bootstrap-token users (workers) request and get kubelet client certificates.
	for name, role := range map[string]string{
		"kairos-sim:kubelet-bootstrap":          "system:node-bootstrapper",
		"kairos-sim:node-autoapprove-bootstrap": "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
	} {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:bootstrappers"}},
		}
		if err := c.client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err)
		}
	}
	return nil
}

// startLoop starts the cluster's background loops: the one that honours etcd leave requests,
// and the watch that starts the Kairos operator once its CRD is applied.
func (c *Cluster) startLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.loops.Add(2)
	go func() {
		defer c.loops.Done()
		c.watchForKairosOperator(ctx)
	}()
	go func() {
		defer c.loops.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			c.reconcileMembership(ctx)
		}
	}()
}

// HoldLeaveRequests makes the distribution's etcd member controller leave etcd leave requests
// (k0s EtcdMember spec.leave, the k3s remove annotation) alone while hold is true, as when k0s'
// leader is being re-elected or k3s' controllers are still syncing: a request is carried out
// whenever the controller gets to it, and a test can make that "later" happen on purpose.
func (c *Cluster) HoldLeaveRequests(hold bool) { c.leavesHeld.Store(hold) }

// HoldUpgradeCompletion keeps the simulated Kairos operator, while hold is true, from reporting
// any node's upgrade done once the node is back from its reboot (it stays Running, cordoned), as
// an operator slow to see the node back would: Cluster API's in-place update of that Machine
// cannot end meanwhile. A test acts on the node in that moment without racing the update's end.
func (c *Cluster) HoldUpgradeCompletion(hold bool) { c.upgradesHeld.Store(hold) }

// Stop stops the cluster's API server and etcd and removes its files.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	close(c.stopping)
	op := c.operator
	c.mu.Unlock()
	if op != nil {
		op.stop()
	}
	if c.cancel != nil {
		c.cancel()
		c.loops.Wait()
	}
	if c.vip != nil {
		c.vip.close()
	}
	c.stopProcesses()
	_ = os.RemoveAll(c.dir)
}

// VIPHolder returns the node holding the cluster's endpoint as a virtual IP, or nil: when the
// endpoint is no virtual IP, or no node holds it (then nothing answers on the endpoint).
func (c *Cluster) VIPHolder() *Node {
	if c.vip == nil {
		return nil
	}
	return c.vip.Holder()
}

// reachable tells whether anything answers on the endpoint: always behind a load balancer
// (the API server itself stands in for one), behind a virtual IP only while a node holds it.
func (c *Cluster) reachable() bool {
	return c.vip == nil || c.vip.served()
}

// stopProcesses kills the API server and every etcd member still running: the simulated
// machines are switched off, and nothing of their state is kept.
func (c *Cluster) stopProcesses() {
	if c.controllerManager != nil {
		c.controllerManager.stop(0)
	}
	c.apiserver.stop(0)
	if c.etcdCli != nil {
		_ = c.etcdCli.Close()
	}
	if c.etcdLB != nil {
		c.etcdLB.close()
	}
	c.mu.Lock()
	servers := make([]*etcdServer, 0, len(c.servers))
	for _, e := range c.servers {
		servers = append(servers, e)
	}
	c.mu.Unlock()
	for _, e := range servers {
		e.shutdown(0)
	}
}

// issueClientCert signs a kubelet's client certificate with the cluster's client CA.
func (c *Cluster) issueClientCert(cn string, orgs []string) (*pki.KeyPair, error) {
	return newClientCert(c.pki.clientCA, cn, orgs, 24*time.Hour)
}

// configFor returns a rest.Config for a client certificate, trusting caCert for the server.
func (c *Cluster) configFor(caCert []byte, kp *pki.KeyPair) *rest.Config {
	return &rest.Config{
		Host:            "https://" + c.apiAddr,
		TLSClientConfig: rest.TLSClientConfig{CAData: caCert, CertData: kp.Cert, KeyData: kp.Key},
	}
}

// approveNodeCSR does what kube-controller-manager's csrapproving and csrsigning controllers
// do for a kubelet's first client certificate: approve requests of bootstrap-token users for
// system:node:<name> in system:nodes, and sign them with the cluster CA.
func (c *Cluster) approveNodeCSR(ctx context.Context, name string) error {
	csrs := c.kube.CertificatesV1().CertificateSigningRequests()
	csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return fmt.Errorf("CSR %s: signer %s is not auto-approved", name, csr.Spec.SignerName)
	}
	if !strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") || !containsString(csr.Spec.Groups, "system:bootstrappers") {
		return fmt.Errorf("CSR %s was requested by %s %v, not by a bootstrap token", name, csr.Spec.Username, csr.Spec.Groups)
	}
	req, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return fmt.Errorf("CSR %s: %w", name, err)
	}
	if !strings.HasPrefix(req.Subject.CommonName, "system:node:") || len(req.Subject.Organization) != 1 || req.Subject.Organization[0] != "system:nodes" {
		return fmt.Errorf("CSR %s asks for %s %v, not a node client certificate", name, req.Subject.CommonName, req.Subject.Organization)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: "AutoApproved", Message: "Auto approving kubelet client certificate after SubjectAccessReview.",
	})
	if csr, err = csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("approving CSR %s: %w", name, err)
	}
	certPEM, err := signCSR(c.pki.clientCA, req, 365*24*time.Hour)
	if err != nil {
		return fmt.Errorf("signing CSR %s: %w", name, err)
	}
	csr.Status.Certificate = certPEM
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("issuing the certificate of CSR %s: %w", name, err)
	}
	return nil
}

// k0sJoinAPI checks a controller join token the way k0s' join API (port 9443) does: the
// bootstrap-token Secret must exist, hold the token's secret, allow controller joins and, as
// k0s' token cleaner deletes expired tokens, not be expired.
func (c *Cluster) k0sJoinAPI(ctx context.Context, t bootstrapToken) error {
	if c.single {
		return errors.New("the controller runs with --single and accepts no joins")
	}
	s := &corev1.Secret{}
	err := c.client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: t.secretName()}, s)
	if apierrors.IsNotFound(err) {
		return errUnauthorized("no bootstrap token " + t.id)
	}
	if err != nil {
		return err
	}
	if s.Type != corev1.SecretTypeBootstrapToken {
		return errUnauthorized("secret " + s.Name + " is not a bootstrap token")
	}
	if string(s.Data["token-secret"]) != t.secret {
		return errUnauthorized("wrong secret for bootstrap token " + t.id)
	}
	if string(s.Data["usage-controller-join"]) != "true" && string(s.Data["usage-bootstrap-controller-join"]) != "true" {
		return errUnauthorized("bootstrap token " + t.id + " does not allow controller joins")
	}
	if exp := string(s.Data["expiration"]); exp != "" {
		at, err := time.Parse(time.RFC3339, exp)
		if err != nil {
			return errUnauthorized("bootstrap token " + t.id + " has an unreadable expiration")
		}
		if time.Now().After(at) {
			return errUnauthorized("bootstrap token " + t.id + " expired at " + exp)
		}
	}
	return nil
}

func errUnauthorized(why string) error {
	return fmt.Errorf("join API answered 401 Unauthorized (%s)", why)
}

// k3sSaveBootstrap does what a k3s server with embedded etcd does once its etcd serves, before
// its API server starts: it keeps the cluster's bootstrap data in etcd under its token's key, or
// finds it there (a restart, a restored snapshot of this cluster), and refuses to start on
// bootstrap data of another token (a restored snapshot of another cluster). What the key holds
// is not modelled (k3s: the CAs and keys, encrypted with the token's passphrase); the key is
// what tells the tokens apart.
func (c *Cluster) k3sSaveBootstrap(ctx context.Context) error {
	cli, err := c.etcdClient()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(rctx, k3sBootstrapPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("reading k3s' bootstrap data from etcd: %w", err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if err := checkK3sBootstrapKeys(keys, c.k3sBootstrapKey); err != nil {
		return refuse(ReasonBootstrapDataRefused, "k3s: %v", err)
	}
	if len(keys) > 0 {
		return nil
	}
	if _, err := cli.Put(rctx, c.k3sBootstrapKey, "bootstrap data of the simulated cluster, encrypted with the token's passphrase in k3s"); err != nil {
		return fmt.Errorf("saving k3s' bootstrap data to etcd: %w", err)
	}
	return nil
}

// k3sValidateToken is what a joining k3s node does before it authenticates: parse its secure
// token and compare the CA hash it pins with the hash of the bundle the server serves at
// /cacerts (k3s pkg/clientaccess/token.go, ParseAndValidateToken and validateCAHash). A
// mismatch fails the join; the node logs it and retries (k3s pkg/agent/config/config.go).
func (c *Cluster) k3sValidateToken(t string) (k3sToken, error) {
	tok, err := parseK3sToken(t)
	if err != nil {
		return k3sToken{}, err
	}
	if want := k3sCAHash(c.pki.serverCA.Cert); tok.caHash != want {
		return k3sToken{}, fmt.Errorf("token CA hash %s does not match the Cluster CA certificate hash %s", tok.caHash, want)
	}
	return tok, nil
}

// k3sAgentJoin checks a joining agent's token the way the agent and the supervisor do: the CA
// hash must match, and the password must be the "node" user's of the supervisor's passwd file
// (the agent authenticates as "node" whatever user its token names: k3s
// pkg/agent/config/config.go, clientaccess.WithUser("node")). With an agent token given to
// the servers, that is the password after "::node:" of their --agent-token-file (k3s
// pkg/daemons/control/deps/deps.go getNodePass, pkg/passwd/passwd.go EnsureUser); the server
// token's password then does not join agents.
func (c *Cluster) k3sAgentJoin(t string) error {
	tok, err := c.k3sValidateToken(t)
	if err != nil {
		return err
	}
	if tok.password != c.k3sPasswd.node {
		return errors.New("the supervisor answered 401 Unauthorized: the token's password is not the cluster's agent (node) password")
	}
	return nil
}

// k3sServerJoin checks a joining server's token the way the server and the supervisor do: the
// CA hash must match and the server authenticates as "server" (k3s pkg/cluster/bootstrap.go,
// shouldBootstrapLoad: clientaccess.WithUser("server")) with the "server" user's password of
// the supervisor's passwd file, the only user allowed /v1-k3s/server-bootstrap (k3s
// pkg/server/router.go). A token of user "node" (an agent token) is refused: k3s fails it
// because its password is the agent password, not the server's; the simulation refuses it even
// where both passwords are equal (k3s without a separate agent token), as a server holding the
// agent token is a rendering mistake.
func (c *Cluster) k3sServerJoin(t string) error {
	tok, err := c.k3sValidateToken(t)
	if err != nil {
		return err
	}
	if tok.user == k3sNodeUser {
		return errors.New("the supervisor answered 401 Unauthorized: the token is an agent token (user \"node\"); a server joins with the server token (user \"server\")")
	}
	if tok.password != c.k3sPasswd.server {
		return errors.New("the supervisor answered 401 Unauthorized: the token's password is not the cluster's")
	}
	return nil
}

// k3sCheckServerAgentToken checks that a joining server keeps the cluster's agent password: on
// every start k3s writes the "node" password of its own passwd file from its --agent-token-file
// (or, without one, from its server token's password: getNodePass and genUsers in k3s
// pkg/daemons/control/deps/deps.go, EnsureUser in pkg/passwd/passwd.go), so a server with
// another agent token, or none, locks the cluster's agents out of its supervisor. k3s also
// validates a joining server's configuration by authenticating as "node" with its agent token
// (pkg/cluster/bootstrap.go compareConfig: some releases fail the join when that is refused,
// others skip the validation with a warning), and k3s requires the agent token on every server
// (k3s-io/k3s#4881). The document would fail the same way on every boot: a refusal. That
// validation also checks the CA hash a secure agent token pins (ParseAndValidateToken), which
// fails the join like any CA hash mismatch.
func (c *Cluster) k3sCheckServerAgentToken(token, agentToken string) error {
	if strings.HasPrefix(agentToken, "K10") {
		if _, err := c.k3sValidateToken(agentToken); err != nil {
			return retry(ReasonJoinFailed, "validating the cluster's configuration with the agent token (--agent-token-file): %v", err)
		}
	}
	if newK3sPasswd(token, agentToken).node == c.k3sPasswd.node {
		return nil
	}
	if agentToken == "" {
		return refuse(ReasonBootstrapDataRefused, "the server has no --agent-token-file: k3s would set the agent (node) password to its server token's, which is not the cluster's agent password, and refuse the cluster's agents")
	}
	return refuse(ReasonBootstrapDataRefused, "the server's agent token (--agent-token-file) is not the cluster's: its password differs from the agent password the cluster's agents hold")
}

// checkK3sToken checks the token an init server was given against its CA: k3s refuses to start
// when a secure token pins another CA than the one on disk.
func checkK3sToken(t string, serverCA []byte) error {
	tok, err := parseK3sToken(t)
	if err != nil {
		return err
	}
	if want := k3sCAHash(serverCA); tok.caHash != want {
		return fmt.Errorf("token CA hash %s does not match the hash %s of server-ca.crt", tok.caHash, want)
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
