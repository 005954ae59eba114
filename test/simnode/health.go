package simnode

import (
	"context"
	"sort"
	"time"
)

// EtcdMemberHealth is what one member of a simulated cluster's etcd says of itself when asked
// directly (etcd's Status call on the member's own client address), as `etcdctl endpoint
// status` against each member would.
type EtcdMemberHealth struct {
	// Name is the etcd member name; NodeName the Node of the server running it.
	Name, NodeName string
	// Healthy tells that the member answered, knows a leader and reports no error: it takes
	// part in raft.
	Healthy bool
	// IsLearner tells a learner, which does not vote.
	IsLearner bool
	// Leaderless tells that the member answered but knows no leader: an election is under way,
	// as for an election timeout or two whenever leadership moves (a leader that stops hands it
	// over first, and the other followers learn the new leader from its first append).
	Leaderless bool
	// Err is why the member is not healthy ("" when it is).
	Err string
}

// EtcdHealth asks every member the cluster knows (not removed) for its status, each on its own
// address: unlike EtcdMembers it needs no quorum, so that a test can sample how many voters are
// healthy while the control plane works, including at the moments quorum would be at risk. Each
// member is given timeout to answer.
func (c *Cluster) EtcdHealth(ctx context.Context, timeout time.Duration) []EtcdMemberHealth {
	if c == nil {
		return nil
	}
	cli, err := c.etcdClient()
	c.mu.Lock()
	var servers []*etcdServer
	for _, e := range c.servers {
		e.mu.Lock()
		removed := e.removed
		e.mu.Unlock()
		if !removed {
			servers = append(servers, e)
		}
	}
	c.mu.Unlock()
	out := make([]EtcdMemberHealth, 0, len(servers))
	for _, e := range servers {
		h := EtcdMemberHealth{Name: e.name, NodeName: e.node.Name()}
		switch {
		case err != nil:
			h.Err = err.Error()
		case !e.running():
			h.Err = "its etcd process does not run"
		default:
			sctx, cancel := context.WithTimeout(ctx, timeout)
			resp, serr := cli.Status(sctx, "https://"+e.local)
			cancel()
			switch {
			case serr != nil:
				h.Err = serr.Error()
			case resp.Leader == 0:
				h.Err = "it knows no leader"
				h.IsLearner, h.Leaderless = resp.IsLearner, true
			case len(resp.Errors) > 0:
				h.Err = resp.Errors[0]
				h.IsLearner = resp.IsLearner
			default:
				h.Healthy, h.IsLearner = true, resp.IsLearner
			}
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
