package kairoscontrolplane

import (
	"context"
	"errors"
	"sort"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// memberState is what a fake etcd member does.
type memberState int

const (
	memberUp memberState = iota
	// memberDown: its etcd process is dead; nothing answers at its address.
	memberDown
	// memberPartitioned: it answers, but cannot reach its peers: no leader, no quorum reads.
	memberPartitioned
	// memberNotStarted: added to the member list, its etcd not running yet (no name).
	memberNotStarted
)

// fakeMember is one member of a fake etcd cluster.
type fakeMember struct {
	id       uint64
	name     string
	peerHost string
	learner  bool
	state    memberState
	alarm    etcdserverpb.AlarmType
}

// fakeEtcd is an etcd cluster as its client API shows it, with quorum computed from the members'
// states: a member answers quorum reads only when it is up, connected, and a majority of the
// voting members is too. Unit tests only; the lifecycle tests run real etcd members.
type fakeEtcd struct {
	mu      sync.Mutex
	members []*fakeMember
	nextID  uint64
	// removed lists the IDs MemberRemove removed, in order.
	removed []uint64
	// dials counts Dial calls by host.
	dials map[string]int
	// memberLists counts MemberList calls; onMemberList, when set, runs at the start of each
	// (with mu held), so that a test can change the cluster between two observations.
	memberLists  int
	onMemberList func(f *fakeEtcd, call int)
}

func newFakeEtcd() *fakeEtcd { return &fakeEtcd{nextID: 0x1000, dials: map[string]int{}} }

func (f *fakeEtcd) add(name, host string) *fakeMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	m := &fakeMember{id: f.nextID, name: name, peerHost: host}
	f.members = append(f.members, m)
	return m
}

func (f *fakeEtcd) byName(name string) *fakeMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

func (f *fakeEtcd) setState(m *fakeMember, state memberState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.state = state
}

func (f *fakeEtcd) removeByName(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.members {
		if m.name == name {
			f.members = append(f.members[:i], f.members[i+1:]...)
			return
		}
	}
}

func (f *fakeEtcd) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.members {
		out = append(out, m.name)
	}
	sort.Strings(out)
	return out
}

// hasQuorum must be called with mu held.
func (f *fakeEtcd) hasQuorum() bool {
	voting, up := 0, 0
	for _, m := range f.members {
		if m.learner {
			continue
		}
		voting++
		if m.state == memberUp {
			up++
		}
	}
	return voting > 0 && up >= voting/2+1
}

func (f *fakeEtcd) leader() uint64 {
	for _, m := range f.members {
		if !m.learner && m.state == memberUp {
			return m.id
		}
	}
	return 0
}

type fakeEtcdDialer struct{ etcd *fakeEtcd }

// factory returns an etcdDialerFactory for the Reconciler that checks it gets the cluster's CA.
func (f *fakeEtcd) factory() etcdDialerFactory {
	return func(_ types.UID, ca *pki.KeyPair) (etcdDialer, error) {
		if ca == nil || len(ca.Cert) == 0 || len(ca.Key) == 0 {
			return nil, errors.New("no etcd CA")
		}
		return &fakeEtcdDialer{etcd: f}, nil
	}
}

func (d *fakeEtcdDialer) Dial(_ context.Context, host string) (etcdEndpoint, error) {
	d.etcd.mu.Lock()
	defer d.etcd.mu.Unlock()
	d.etcd.dials[host]++
	for _, m := range d.etcd.members {
		if m.peerHost == host {
			return &fakeEndpoint{etcd: d.etcd, member: m}, nil
		}
	}
	// clientv3 dials lazily: an address nobody serves fails on the first call.
	return &fakeEndpoint{etcd: d.etcd, host: host}, nil
}

type fakeEndpoint struct {
	etcd   *fakeEtcd
	member *fakeMember
	host   string
}

var errUnavailable = errors.New("rpc error: code = Unavailable desc = connection refused")

// serving must be called with mu held: is there a live member at this address?
func (e *fakeEndpoint) serving() error {
	if e.member == nil || e.member.state == memberDown || e.member.state == memberNotStarted || !e.etcd.contains(e.member) {
		return errUnavailable
	}
	return nil
}

func (f *fakeEtcd) contains(m *fakeMember) bool {
	for _, o := range f.members {
		if o == m {
			return true
		}
	}
	return false
}

// quorum must be called with mu held.
func (e *fakeEndpoint) quorum() error {
	if err := e.serving(); err != nil {
		return err
	}
	if e.member.state == memberPartitioned || !e.etcd.hasQuorum() {
		return errors.New("etcdserver: request timed out")
	}
	return nil
}

func (e *fakeEndpoint) Status(context.Context) (*clientv3.StatusResponse, error) {
	e.etcd.mu.Lock()
	defer e.etcd.mu.Unlock()
	if err := e.serving(); err != nil {
		return nil, err
	}
	st := &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: e.member.id}, IsLearner: e.member.learner}
	if e.member.state == memberUp && e.etcd.hasQuorum() {
		st.Leader = e.etcd.leader()
	} else {
		st.Errors = append(st.Errors, "etcdserver: no leader")
	}
	// As etcd 3.6 answers (maintenanceServer.Status): every alarm of the cluster, whichever
	// member raised it, in the alarm's protobuf text.
	for _, m := range e.etcd.members {
		if m.alarm != etcdserverpb.AlarmType_NONE {
			st.Errors = append(st.Errors, (&etcdserverpb.AlarmMember{MemberID: m.id, Alarm: m.alarm}).String())
		}
	}
	return st, nil
}

func (e *fakeEndpoint) MemberList(_ context.Context, linearizable bool) ([]*etcdserverpb.Member, error) {
	e.etcd.mu.Lock()
	defer e.etcd.mu.Unlock()
	e.etcd.memberLists++
	if e.etcd.onMemberList != nil {
		e.etcd.onMemberList(e.etcd, e.etcd.memberLists)
	}
	if err := e.serving(); err != nil {
		return nil, err
	}
	if err := e.quorum(); err != nil && linearizable {
		return nil, err
	}
	var out []*etcdserverpb.Member
	for _, m := range e.etcd.members {
		name := m.name
		if m.state == memberNotStarted {
			name = ""
		}
		out = append(out, &etcdserverpb.Member{ID: m.id, Name: name, PeerURLs: []string{"https://" + m.peerHost + ":2380"}, IsLearner: m.learner})
	}
	return out, nil
}

func (e *fakeEndpoint) AlarmList(context.Context) ([]*etcdserverpb.AlarmMember, error) {
	e.etcd.mu.Lock()
	defer e.etcd.mu.Unlock()
	if err := e.quorum(); err != nil {
		return nil, err
	}
	var out []*etcdserverpb.AlarmMember
	for _, m := range e.etcd.members {
		if m.alarm != etcdserverpb.AlarmType_NONE {
			out = append(out, &etcdserverpb.AlarmMember{MemberID: m.id, Alarm: m.alarm})
		}
	}
	return out, nil
}

func (e *fakeEndpoint) QuorumRead(context.Context) error {
	e.etcd.mu.Lock()
	defer e.etcd.mu.Unlock()
	return e.quorum()
}

func (e *fakeEndpoint) MemberRemove(_ context.Context, id uint64) error {
	e.etcd.mu.Lock()
	defer e.etcd.mu.Unlock()
	if err := e.quorum(); err != nil {
		return err
	}
	for i, m := range e.etcd.members {
		if m.id == id {
			e.etcd.members = append(e.etcd.members[:i], e.etcd.members[i+1:]...)
			e.etcd.removed = append(e.etcd.removed, id)
			return nil
		}
	}
	return errors.New("etcdserver: member not found")
}

func (e *fakeEndpoint) Close() error { return nil }
