package fleet

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	kresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// The kubelets. Every simulated node does what a kubelet does to its API server at steady state:
// it renews its Lease in kube-node-lease every 10 s (the kubelet renews at a quarter of the
// 40 s lease duration, pkg/kubelet/nodelease) and reports its Node status every 5 minutes when
// nothing changed (--node-status-report-frequency's default), which moves the conditions'
// lastHeartbeatTime. Both are writes through the same code as an API request, so they bump
// resourceVersions and reach every watch, which is the churn a manager's Node and Lease
// informers pay for. They are not counted as requests: they are the kubelet's, not the managers'.
//
// One goroutine serves every node from a heap of due times: a fleet of thousands of nodes costs
// one timer, not a goroutine and a ticker each.

type taskKind uint8

const (
	renewLease taskKind = iota
	reportStatus
)

type task struct {
	due     time.Time
	cluster *Cluster
	kind    taskKind
}

type taskHeap []task

func (h taskHeap) Len() int           { return len(h) }
func (h taskHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h taskHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *taskHeap) Push(x any)        { *h = append(*h, x.(task)) }
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = task{}
	*h = old[:len(old)-1]
	return t
}

type scheduler struct {
	mu    sync.Mutex
	tasks taskHeap
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// errors counts kubelet writes that failed (a cluster closing under it, or a bug).
	errors int
}

func newScheduler() *scheduler {
	s := &scheduler{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *scheduler) add(t task) {
	s.mu.Lock()
	heap.Push(&s.tasks, t)
	first := s.tasks[0] == t
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (s *scheduler) close() {
	close(s.stop)
	<-s.done
}

func (s *scheduler) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		var due []task
		for len(s.tasks) > 0 && !s.tasks[0].due.After(now) {
			due = append(due, heap.Pop(&s.tasks).(task))
		}
		wait := time.Hour
		if len(s.tasks) > 0 {
			wait = s.tasks[0].due.Sub(now)
		}
		s.mu.Unlock()
		for _, t := range due {
			select {
			case <-t.cluster.closing:
				continue
			default:
			}
			next, err := t.cluster.kubelet(t.kind, now)
			if err != nil {
				s.mu.Lock()
				s.errors++
				s.mu.Unlock()
			}
			// The next beat is due one period after this one was, not after it ran: a late
			// beat does not drift the node's schedule.
			t.due = t.due.Add(next)
			if !t.due.After(now) {
				t.due = now.Add(next)
			}
			s.add(t)
		}
		if len(due) > 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-s.stop:
			return
		}
	}
}

// schedule starts the node's beats at random phases within their periods, as nodes of a real
// fleet booted at different times.
func (c *Cluster) schedule(s *scheduler, now time.Time) {
	s.add(task{due: now.Add(rand.N(c.f.opts.LeaseInterval)), cluster: c, kind: renewLease})
	s.add(task{due: now.Add(rand.N(c.f.opts.StatusInterval)), cluster: c, kind: reportStatus})
}

// kubelet performs one beat and returns the period of this kind of beat.
func (c *Cluster) kubelet(kind taskKind, now time.Time) (time.Duration, error) {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	switch kind {
	case renewLease:
		return c.f.opts.LeaseInterval, c.renewLeaseLocked(now)
	default:
		return c.f.opts.StatusInterval, c.reportStatusLocked(now, nil)
	}
}

const nodeLeaseNamespace = "kube-node-lease"

func (c *Cluster) renewLeaseLocked(now time.Time) error {
	k := objKey{res: c.res.index[resLeases], namespace: nodeLeaseNamespace, name: c.spec.NodeName}
	e := c.store.get(k)
	if e == nil {
		// The kubelet creates its lease again when someone deleted it.
		_, err := c.create(resLeases, nodeLeaseNamespace, mustObject(c.lease(now)))
		return err
	}
	o, err := decodeObject(e.data)
	if err != nil {
		return fmt.Errorf("decoding the lease of %s: %w", c.spec.NodeName, err)
	}
	spec, _ := o["spec"].(object)
	if spec == nil {
		spec = object{}
		o["spec"] = spec
	}
	spec["renewTime"] = metav1.NewMicroTime(now).Format(metav1.RFC3339Micro)
	spec["holderIdentity"] = c.spec.NodeName
	spec["leaseDurationSeconds"] = 40
	_, err = c.update(resLeases, nodeLeaseNamespace, c.spec.NodeName, o, "", true)
	return err
}

// reportStatusLocked writes the Node's status with fresh heartbeats; ready, when not nil,
// changes the Ready condition.
func (c *Cluster) reportStatusLocked(now time.Time, ready *bool) error {
	k := objKey{res: c.res.index[resNodes], name: c.spec.NodeName}
	e := c.store.get(k)
	if e == nil {
		return nil // deleted (by Cluster API, say); a real kubelet would register again
	}
	n := &corev1.Node{}
	if err := jsonUnmarshal(e.data, n); err != nil {
		return fmt.Errorf("decoding Node %s: %w", c.spec.NodeName, err)
	}
	t := metav1.NewTime(now)
	for i := range n.Status.Conditions {
		cond := &n.Status.Conditions[i]
		cond.LastHeartbeatTime = t
		if cond.Type == corev1.NodeReady && ready != nil {
			want := corev1.ConditionFalse
			reason, msg := "KubeletNotReady", "container runtime network not ready"
			if *ready {
				want, reason, msg = corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
			}
			if cond.Status != want {
				cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = want, reason, msg, t
			}
		}
	}
	_, err := c.update(resNodes, "", c.spec.NodeName, mustObject(n), "status", true)
	return err
}

// node is the Node a kubelet registers: what the managers and Cluster API read (providerID,
// addresses, Ready, the control-plane role, k3s' etcd annotations) and what makes its size
// typical. A real Node also lists its images (up to 50, often several KiB): left out.
func (c *Cluster) node(now time.Time) *corev1.Node {
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, LastHeartbeatTime: t, LastTransitionTime: t, Reason: reason, Message: msg}
	}
	n := &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: c.spec.NodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": c.spec.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				"node-role.kubernetes.io/control-plane": "true",
			},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{ProviderID: c.spec.ProviderID, PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: kresource.MustParse("4"), corev1.ResourceMemory: kresource.MustParse("8Gi"), corev1.ResourcePods: kresource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: kresource.MustParse("4"), corev1.ResourceMemory: kresource.MustParse("7800Mi"), corev1.ResourcePods: kresource.MustParse("110")},
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: c.nodeIP.String()}, {Type: corev1.NodeHostName, Address: c.spec.NodeName}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: c.member.name, SystemUUID: c.member.name, BootID: c.member.name,
				KernelVersion: "6.8.0-kairos", OSImage: "Kairos", ContainerRuntimeVersion: "containerd://1.7.27",
				KubeletVersion: c.spec.KubernetesVersion, KubeProxyVersion: c.spec.KubernetesVersion,
				OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
	if c.spec.Distribution == K3s {
		// k3s servers with embedded etcd carry their member on the Node (simnode/etcd.go).
		n.Labels[simnode.K3sEtcdRoleLabel] = "true"
		n.Annotations[simnode.K3sNodeNameAnnotation] = c.member.name
		n.Annotations[simnode.K3sNodeAddressAnnotation] = c.nodeIP.String()
	}
	return n
}

func (c *Cluster) lease(now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: c.spec.NodeName, Namespace: nodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(c.spec.NodeName), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: ptr.To(metav1.NewMicroTime(now)),
		},
	}
}

// etcdMember is k0s' EtcdMember for the node's member, as k0s publishes it once joined.
func (c *Cluster) etcdMember(now time.Time) object {
	return object{
		"apiVersion": resEtcdMembers.apiVersion(), "kind": resEtcdMembers.kind,
		"metadata": object{"name": c.member.name},
		"spec":     object{"leave": false},
		"status": object{
			"peerAddress": c.nodeIP.String(), "memberID": fmt.Sprintf("%x", c.member.id), "reconcileStatus": "Success",
			"conditions": []any{object{"type": "Joined", "status": "True", "lastTransitionTime": now.UTC().Format(time.RFC3339)}},
		},
	}
}
