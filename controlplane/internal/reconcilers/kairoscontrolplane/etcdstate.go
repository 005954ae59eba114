package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

// etcdMember is one member of the workload cluster's etcd, as etcd's own member list has it,
// with what this reconciliation found out about it.
type etcdMember struct {
	ID        uint64
	Name      string
	PeerHost  string
	IsLearner bool
	// machine is the control-plane Machine hosting the member; nil for an orphan.
	machine *clusterv1.Machine
	// problem says why the member is not healthy; empty when it is.
	problem string
}

// String names a member for messages: its name, or its ID while it has none (a member that
// was added but never started).
func (m *etcdMember) String() string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x (not started)", m.ID)
}

func (m *etcdMember) healthy() bool { return m.problem == "" }

// etcdState is what one reconciliation learned about etcd, asked once in newScope.
type etcdState struct {
	// members is etcd's member list, read with quorum; nil when no member could answer.
	members []*etcdMember
	// err says why members is nil.
	err error
	// joining names the members that were added but have not started, as a member that answers
	// without quorum knows them: a k0s controller joins as a voting member (k0s' join API adds
	// it with a plain member add), so etcd has no quorum from the add until the new member runs,
	// which takes seconds. Only read when members is nil.
	joining []string
	// byMachine is the member each Machine hosts, by Machine name.
	byMachine map[string]*etcdMember
}

// known tells whether etcd's member list could be read.
func (e *etcdState) known() bool { return e != nil && e.members != nil }

// unknownReason says why the member list is not known.
func (e *etcdState) unknownReason() error {
	if e == nil {
		return errors.New("etcd is not observed before the control plane is initialized")
	}
	return e.err
}

// memberOf returns the member a Machine hosts, or nil.
func (e *etcdState) memberOf(m *clusterv1.Machine) *etcdMember {
	if e == nil || m == nil {
		return nil
	}
	return e.byMachine[m.Name]
}

// orphans are members no control-plane Machine hosts.
func (e *etcdState) orphans() []*etcdMember {
	var out []*etcdMember
	if e == nil {
		return nil
	}
	for _, m := range e.members {
		if m.machine == nil {
			out = append(out, m)
		}
	}
	return out
}

// observeEtcd reads etcd's member list through the first control-plane node that serves a
// quorum read, then checks every member at its own address, and matches members to Machines.
// It needs the cluster's etcd CA; nothing is observed before the control plane is initialized.
func (r *Reconciler) observeEtcd(ctx context.Context, s *scope) *etcdState {
	state := &etcdState{byMachine: map[string]*etcdMember{}}
	ca, err := r.etcdCA(ctx, s)
	if err != nil {
		state.err = err
		return state
	}
	dialer, err := r.etcdDialers(s.cluster.UID, ca)
	if err != nil {
		state.err = err
		return state
	}
	addresses := r.machineAddresses(ctx, s)

	// Ask the nodes whose member was healthy last time first: they most likely answer.
	candidates := s.machines.UnsortedList()
	slices.SortStableFunc(candidates, func(a, b *clusterv1.Machine) int {
		ha, hb := conditions.IsTrue(a, controlplanev1.MachineEtcdMemberHealthyCondition), conditions.IsTrue(b, controlplanev1.MachineEtcdMemberHealthyCondition)
		switch {
		case ha && !hb:
			return -1
		case hb && !ha:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	var list []*etcdserverpb.Member
	var alarms []*etcdserverpb.AlarmMember
	var errs []error
	for _, m := range candidates {
		for _, host := range addresses[m.Name] {
			list, alarms, err = readMembership(ctx, dialer, host)
			if err == nil {
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", net.JoinHostPort(host, strconv.Itoa(render.EtcdClientPort)), err))
		}
		if list != nil {
			break
		}
	}
	if list == nil {
		if len(errs) == 0 {
			state.err = errors.New("no control-plane Machine reports an address yet")
		} else {
			state.err = kerrors.NewAggregate(errs)
		}
		state.joining = joiningMembers(ctx, dialer, candidates, addresses)
		return state
	}

	state.members = make([]*etcdMember, 0, len(list))
	for _, pm := range list {
		m := &etcdMember{ID: pm.ID, Name: pm.Name, IsLearner: pm.IsLearner}
		if len(pm.PeerURLs) > 0 {
			if u, err := url.Parse(pm.PeerURLs[0]); err == nil {
				m.PeerHost = u.Hostname()
			}
		}
		state.members = append(state.members, m)
	}
	slices.SortFunc(state.members, func(a, b *etcdMember) int { return strings.Compare(a.String(), b.String()) })
	matchMembers(state, s.machines, addresses)

	var wg sync.WaitGroup
	for _, m := range state.members {
		hosts := []string{}
		if m.PeerHost != "" {
			hosts = append(hosts, m.PeerHost)
		}
		if m.machine != nil {
			for _, h := range addresses[m.machine.Name] {
				if !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.problem = probeMember(ctx, dialer, m, hosts, alarms)
		}()
	}
	wg.Wait()
	return state
}

// etcdCA reads the cluster's etcd CA, which signs the control plane's etcd client certificate.
func (r *Reconciler) etcdCA(ctx context.Context, s *scope) (*pki.KeyPair, error) {
	p, err := clustersecret.LookupPKI(ctx, r.Client, s.clusterKey())
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's etcd CA: %w", err)
	}
	return &p.EtcdCA, nil
}

// joiningMembers asks the members that answer without quorum for the members added but not
// started (they have no name yet), identified by their peer URL.
func joiningMembers(ctx context.Context, dialer etcdDialer, machines []*clusterv1.Machine, addresses map[string][]string) []string {
	for _, m := range machines {
		for _, host := range addresses[m.Name] {
			ep, err := dialer.Dial(ctx, host)
			if err != nil {
				continue
			}
			list, err := ep.MemberList(ctx, false)
			_ = ep.Close()
			if err != nil {
				continue
			}
			var out []string
			for _, mem := range list {
				if mem.Name == "" && len(mem.PeerURLs) > 0 {
					out = append(out, mem.PeerURLs[0])
				}
			}
			return out
		}
	}
	return nil
}

// readMembership reads the member list with quorum, and the alarms, through one member.
func readMembership(ctx context.Context, dialer etcdDialer, host string) ([]*etcdserverpb.Member, []*etcdserverpb.AlarmMember, error) {
	ep, err := dialer.Dial(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = ep.Close() }()
	list, err := ep.MemberList(ctx, true)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the member list: %w", err)
	}
	alarms, err := ep.AlarmList(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the alarms: %w", err)
	}
	return list, alarms, nil
}

// probeMember checks one member at its own address and says what is wrong with it, or "".
func probeMember(ctx context.Context, dialer etcdDialer, m *etcdMember, hosts []string, alarms []*etcdserverpb.AlarmMember) string {
	for _, a := range alarms {
		if a.MemberID == m.ID && a.Alarm != etcdserverpb.AlarmType_NONE {
			return fmt.Sprintf("etcd member %s raised the %s alarm", m, a.Alarm)
		}
	}
	if m.Name == "" {
		return fmt.Sprintf("etcd member %s was added but has not started", m)
	}
	if m.IsLearner {
		return fmt.Sprintf("etcd member %s is a learner, not yet promoted to a voting member", m)
	}
	if len(hosts) == 0 {
		return fmt.Sprintf("etcd member %s has no peer address to reach it at", m)
	}
	// etcd's Status lists every alarm of the cluster, whichever member raised it (etcd 3.6
	// maintenanceServer.Status); the alarms list, read with quorum, says whose each one is, and
	// the member's own were reported above. The others are not this member's problem.
	othersAlarms := map[string]bool{}
	for _, a := range alarms {
		othersAlarms[a.String()] = true
	}
	var problems []string
	for _, host := range hosts {
		problem := probeHost(ctx, dialer, m, host, othersAlarms)
		if problem == "" {
			return ""
		}
		problems = append(problems, problem)
	}
	return strings.Join(problems, "; ")
}

func probeHost(ctx context.Context, dialer etcdDialer, m *etcdMember, host string, othersAlarms map[string]bool) string {
	addr := net.JoinHostPort(host, strconv.Itoa(render.EtcdClientPort))
	ep, err := dialer.Dial(ctx, host)
	if err != nil {
		return fmt.Sprintf("etcd member %s does not answer at %s: %v", m, addr, err)
	}
	defer func() { _ = ep.Close() }()
	st, err := ep.Status(ctx)
	if err != nil {
		return fmt.Sprintf("etcd member %s does not answer at %s: %v", m, addr, err)
	}
	if st.Header != nil && st.Header.MemberId != m.ID {
		return fmt.Sprintf("the etcd at %s is member %x, not member %s", addr, st.Header.MemberId, m)
	}
	if st.Leader == 0 {
		return fmt.Sprintf("etcd member %s has no leader", m)
	}
	var errs []string
	for _, e := range st.Errors {
		if !othersAlarms[e] {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return fmt.Sprintf("etcd member %s reports: %s", m, strings.Join(errs, "; "))
	}
	if err := ep.QuorumRead(ctx); err != nil {
		return fmt.Sprintf("etcd member %s cannot serve a quorum read: %v", m, err)
	}
	return ""
}

// matchMembers links members and Machines: by the member's peer address among the Machine's
// addresses (both distributions advertise the node address as peer URL: k3s pkg/etcd/etcd.go
// peerURL, k0s storage.etcd.peerAddress defaulting to the node address), else by name (k0s
// names the member after the node's hostname; k3s after the node name with a dash and eight
// hex digits, k3s pkg/etcd/etcd.go).
func matchMembers(state *etcdState, machines collections.Machines, addresses map[string][]string) {
	sorted := machines.SortedByCreationTimestamp()
	for _, mem := range state.members {
		for _, m := range sorted {
			if _, taken := state.byMachine[m.Name]; taken {
				continue
			}
			if mem.PeerHost != "" && slices.Contains(addresses[m.Name], mem.PeerHost) {
				mem.machine, state.byMachine[m.Name] = m, mem
				break
			}
		}
	}
	for _, mem := range state.members {
		if mem.machine != nil || mem.Name == "" {
			continue
		}
		for _, m := range sorted {
			if _, taken := state.byMachine[m.Name]; taken {
				continue
			}
			if slices.ContainsFunc(machineNodeNames(m), func(n string) bool { return memberNamedAfter(mem.Name, n) }) {
				mem.machine, state.byMachine[m.Name] = m, mem
				break
			}
		}
	}
}

// memberNamedAfter tells whether an etcd member name belongs to a node name.
func memberNamedAfter(member, node string) bool {
	if member == node {
		return true
	}
	suffix, ok := strings.CutPrefix(member, node+"-")
	if !ok || len(suffix) != 8 {
		return false
	}
	for _, c := range suffix {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// machineNodeNames are the names a Machine's node goes by: its Node, and the host name its
// infrastructure reports (a k0s controller may join etcd before its kubelet registers).
func machineNodeNames(m *clusterv1.Machine) []string {
	var out []string
	if m.Status.NodeRef.IsDefined() {
		out = append(out, m.Status.NodeRef.Name)
	}
	for _, a := range m.Status.Addresses {
		if a.Type == clusterv1.MachineHostName && !slices.Contains(out, a.Address) {
			out = append(out, a.Address)
		}
	}
	return out
}

// machineAddresses are the addresses at which each Machine's etcd may answer: the
// infrastructure's addresses (internal first), else its Node's.
func (r *Reconciler) machineAddresses(ctx context.Context, s *scope) map[string][]string {
	out := map[string][]string{}
	for _, m := range s.machines {
		for _, t := range []clusterv1.MachineAddressType{clusterv1.MachineInternalIP, clusterv1.MachineExternalIP, clusterv1.MachineInternalDNS, clusterv1.MachineExternalDNS} {
			for _, a := range m.Status.Addresses {
				if a.Type == t && a.Address != "" && !slices.Contains(out[m.Name], a.Address) {
					out[m.Name] = append(out[m.Name], a.Address)
				}
			}
		}
		if len(out[m.Name]) > 0 || !m.Status.NodeRef.IsDefined() {
			continue
		}
		remote, err := r.ClusterCache.GetClient(ctx, s.clusterKey())
		if err != nil {
			continue
		}
		node := &corev1.Node{}
		if err := remote.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node); err != nil {
			continue
		}
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				out[m.Name] = append(out[m.Name], a.Address)
			}
		}
	}
	return out
}

// etcdMemberCondition is a Machine's EtcdMemberHealthy condition.
func etcdMemberCondition(s *scope, m *clusterv1.Machine) metav1.Condition {
	c := metav1.Condition{Type: controlplanev1.MachineEtcdMemberHealthyCondition}
	member := s.etcd.memberOf(m)
	switch {
	case !m.DeletionTimestamp.IsZero():
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.EtcdMemberDeletingReason, "Machine is deleting"
	case s.etcd == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdMemberInspectionFailedReason, "Waiting for the control plane to be initialized"
	case !s.etcd.known():
		c.Status, c.Reason = metav1.ConditionUnknown, controlplanev1.EtcdMemberInspectionFailedReason
		c.Message = fmt.Sprintf("No control-plane node answered a quorum read of etcd's member list: %v", s.etcd.err)
	case member == nil && !m.Status.NodeRef.IsDefined():
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, controlplanev1.EtcdMemberInspectionFailedReason, "Waiting for the Machine's etcd member to join"
	case member == nil:
		c.Status, c.Reason = metav1.ConditionFalse, controlplanev1.EtcdMemberNotHealthyReason
		c.Message = fmt.Sprintf("etcd's members are %s; none is hosted on this Machine (Node %s)", memberNames(s.etcd.members), m.Status.NodeRef.Name)
	case !member.healthy():
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, controlplanev1.EtcdMemberNotHealthyReason, member.problem
	default:
		c.Status, c.Reason = metav1.ConditionTrue, controlplanev1.EtcdMemberHealthyReason
	}
	return c
}

func memberNames(members []*etcdMember) string {
	if len(members) == 0 {
		return "none"
	}
	names := make([]string, 0, len(members))
	for _, m := range members {
		names = append(names, m.String())
	}
	return strings.Join(names, ", ")
}
