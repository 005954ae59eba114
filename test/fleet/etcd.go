package fleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The etcd members. Each cluster's one member listens on its node's address at the etcd client
// port, as k0s and k3s members do, and speaks etcd's own gRPC services (etcdserverpb) over TLS
// with client certificates of the cluster's etcd CA required, as etcd does with
// --client-cert-auth. One gRPC server serves every member: the TLS configuration is chosen per
// connection by the address it arrived at, and so is the member that answers.
//
// What is served is what kairos-capi's control plane calls (controlplane/internal/reconcilers/
// kairoscontrolplane/etcdclient.go): Maintenance.Status, Cluster.MemberList (linearizable or
// not), Maintenance.Alarm (GET), KV.Range (the quorum read) and Cluster.MemberRemove. Everything
// else answers Unimplemented.

// etcdVersion is the etcd the members claim to be: the version the test module builds.
const etcdVersion = "3.6.14"

// Errors as etcd's gRPC layer returns them (go.etcd.io/etcd/api/v3/v3rpc/rpctypes).
var (
	errNoLeader        = status.Error(codes.Unavailable, "etcdserver: no leader")
	errMemberNotFound  = status.Error(codes.NotFound, "etcdserver: member not found")
	errNotEnoughMember = status.Error(codes.FailedPrecondition, "etcdserver: re-configuration failed due to not enough started members")
)

// member is the simulated state of a cluster's etcd member, which tests and the benchmark set.
type member struct {
	mu        sync.Mutex
	id        uint64
	clusterID uint64
	name      string
	peerURL   string
	clientURL string
	// leaderless: the member answers but has no leader (lost quorum, or stuck): Status reports
	// leader 0, and every linearizable call fails with "no leader".
	leaderless bool
	alarms     []pb.AlarmType
}

type etcdServer struct {
	grpc   *grpc.Server
	byAddr sync.Map // listener address -> *Cluster
}

func newEtcdServer() *etcdServer {
	s := &etcdServer{}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c := s.cluster(hello.Conn.LocalAddr())
			if c == nil {
				return nil, fmt.Errorf("no etcd member listens at %s", hello.Conn.LocalAddr())
			}
			c.etcdHandshakes.Add(1)
			return c.etcdTLS, nil
		},
	}
	s.grpc = grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	pb.RegisterMaintenanceServer(s.grpc, &maintenance{s: s})
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	pb.RegisterKVServer(s.grpc, &kv{s: s})
	return s
}

func (s *etcdServer) cluster(addr net.Addr) *Cluster {
	v, ok := s.byAddr.Load(addr.String())
	if !ok {
		return nil
	}
	return v.(*Cluster)
}

// member finds the cluster and member a call arrived at.
func (s *etcdServer) member(ctx context.Context) (*Cluster, *member, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return nil, nil, status.Error(codes.Internal, "no peer information")
	}
	c := s.cluster(p.LocalAddr)
	if c == nil {
		return nil, nil, status.Errorf(codes.Unavailable, "no etcd member listens at %s", p.LocalAddr)
	}
	c.etcdCalls.Add(1)
	return c, c.member, nil
}

func (m *member) header(c *Cluster) *pb.ResponseHeader {
	c.store.mu.Lock()
	rev := int64(c.store.rv)
	c.store.mu.Unlock()
	// The API server's resourceVersion is etcd's revision; the raft term of a member that never
	// lost its leader stays 2.
	return &pb.ResponseHeader{ClusterId: m.clusterID, MemberId: m.id, Revision: rev, RaftTerm: 2}
}

func (m *member) pb() *pb.Member {
	return &pb.Member{ID: m.id, Name: m.name, PeerURLs: []string{m.peerURL}, ClientURLs: []string{m.clientURL}}
}

type maintenance struct {
	pb.UnimplementedMaintenanceServer
	s *etcdServer
}

func (x *maintenance) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	c, m, err := x.s.member(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.header(c)
	resp := &pb.StatusResponse{
		Header: h, Version: etcdVersion, StorageVersion: "3.6.0",
		DbSize: 4 << 20, DbSizeInUse: 2 << 20, DbSizeQuota: 2 << 30,
		RaftIndex: uint64(h.Revision) + 10, RaftAppliedIndex: uint64(h.Revision) + 10, RaftTerm: h.RaftTerm,
	}
	if !m.leaderless {
		resp.Leader = m.id
	}
	// etcd lists every alarm of the cluster in Status (maintenanceServer.Status).
	for _, a := range m.alarmMembers() {
		resp.Errors = append(resp.Errors, a.String())
	}
	return resp, nil
}

func (m *member) alarmMembers() []*pb.AlarmMember {
	var out []*pb.AlarmMember
	for _, a := range m.alarms {
		out = append(out, &pb.AlarmMember{MemberID: m.id, Alarm: a})
	}
	return out
}

func (x *maintenance) Alarm(ctx context.Context, req *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	c, m, err := x.s.member(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaderless {
		return nil, errNoLeader // alarms go through raft
	}
	if req.Action != pb.AlarmRequest_GET {
		return nil, status.Error(codes.Unimplemented, "the simulated etcd only lists alarms")
	}
	return &pb.AlarmResponse{Header: m.header(c), Alarms: m.alarmMembers()}, nil
}

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *etcdServer
}

func (x *clusterServer) MemberList(ctx context.Context, req *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	c, m, err := x.s.member(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.Linearizable && m.leaderless {
		return nil, errNoLeader
	}
	return &pb.MemberListResponse{Header: m.header(c), Members: []*pb.Member{m.pb()}}, nil
}

func (x *clusterServer) MemberRemove(ctx context.Context, req *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	_, m, err := x.s.member(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaderless {
		return nil, errNoLeader
	}
	if req.ID != m.id {
		return nil, errMemberNotFound
	}
	// A single-member cluster cannot remove its only member: etcd refuses a configuration
	// change that leaves no started member.
	return nil, errNotEnoughMember
}

type kv struct {
	pb.UnimplementedKVServer
	s *etcdServer
}

// Range answers the control plane's quorum read. The key space holds nothing the managers read
// (the API server's data is in the store, not here), so every range is empty.
func (x *kv) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	c, m, err := x.s.member(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !req.Serializable && m.leaderless {
		return nil, errNoLeader
	}
	return &pb.RangeResponse{Header: m.header(c)}, nil
}

// EtcdStats counts what a cluster's etcd member saw: TLS handshakes (one per client connection),
// those of them that resumed an earlier session, and calls.
type EtcdStats struct {
	Handshakes uint64
	Resumed    uint64
	Calls      uint64
}

type etcdCounters struct {
	etcdHandshakes, etcdResumed, etcdCalls atomic.Uint64
}
