package kairoscontrolplane

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Preflight checks decide whether the control plane may take its next step (create or delete a
// Machine). Like KubeadmControlPlane's, they fail closed: a member whose health is unknown, a
// member without a Machine or a Machine without a member count as problems, and one operation
// runs at a time. The Machine an operation removes is left out of the checks, because its
// removal is what the operation is for.

// preflightProblems lists what stops a scale step; removing is the Machine a scale-down or
// rollout deletes (nil when adding one).
func (s *scope) preflightProblems(removing *clusterv1.Machine) []string {
	problems := s.problemsExcept(removing)
	if removing != nil && s.etcd.known() {
		if ok, why := s.quorumWithout(removing); !ok {
			problems = append(problems, fmt.Sprintf("removing Machine %s would lose etcd quorum: %s", removing.Name, why))
		}
	}
	problems = dedupe(problems)
	slices.Sort(problems)
	return problems
}

// problemsExcept are the checks of every Machine but skip (none when nil) and of etcd as a whole.
func (s *scope) problemsExcept(skip *clusterv1.Machine) []string {
	var problems []string
	if d := s.deletingMachines(); d.Len() > 0 {
		problems = append(problems, fmt.Sprintf("Machine(s) %s are being deleted", machineNames(d)))
	}
	for _, m := range s.activeMachines().SortedByCreationTimestamp() {
		if skip != nil && m.Name == skip.Name {
			continue
		}
		if !m.Status.NodeRef.IsDefined() {
			problems = append(problems, fmt.Sprintf("Machine %s has no Node yet", m.Name))
			continue
		}
		if !machineReady(m) {
			problems = append(problems, fmt.Sprintf("Machine %s is not ready", m.Name))
		}
		// An unreadable member list is reported once, below, not for every Machine.
		if c := etcdMemberCondition(s, m); c.Status != metav1.ConditionTrue && (s.etcd == nil || s.etcd.known()) {
			problems = append(problems, fmt.Sprintf("Machine %s: %s", m.Name, c.Message))
		}
	}
	return append(problems, s.etcdProblems()...)
}

// remediationScaleUpProblems is the relaxed check for the Machine that replaces a remediated
// one: other Machines may be unhealthy (that is why they are being remediated one after the
// other), as long as the API is still served by a healthy node and adding a member keeps etcd's
// quorum even if the new member never becomes healthy.
func (s *scope) remediationScaleUpProblems() []string {
	var problems []string
	if d := s.deletingMachines(); d.Len() > 0 {
		problems = append(problems, fmt.Sprintf("Machine(s) %s are being deleted", machineNames(d)))
	}
	if !s.etcd.known() {
		problems = append(problems, s.etcdProblems()...)
		return problems
	}
	servesAPI := false
	for _, m := range s.activeMachines() {
		if member := s.etcd.memberOf(m); machineReady(m) && member != nil && member.healthy() {
			servesAPI = true
		}
	}
	if !servesAPI {
		problems = append(problems, "no control-plane Machine is ready with a healthy etcd member to let a new one join")
	}
	if ok, why := s.targetQuorum(nil, true); !ok {
		problems = append(problems, fmt.Sprintf("adding an etcd member could lose quorum: %s", why))
	}
	return problems
}

// etcdProblems are problems of etcd as a whole: an unreadable member list, members no Machine
// hosts.
func (s *scope) etcdProblems() []string {
	if s.etcd == nil {
		return nil
	}
	if !s.etcd.known() {
		return []string{fmt.Sprintf("cannot read etcd's member list with quorum: %v", s.etcd.err)}
	}
	var out []string
	for _, m := range s.etcd.orphans() {
		out = append(out, fmt.Sprintf("etcd member %s (peer %s) belongs to no control-plane Machine", m, m.PeerHost))
	}
	return out
}

// quorumWithout tells whether etcd keeps quorum when Machine m and its etcd member go, and if
// not, why. While any member matches no Machine the check fails closed. A Machine with no member
// of its own may host one of them (a k0s controller joins etcd before its Machine has an address
// or a Node, and a member name the matcher does not recognise matches nothing); and an unmatched
// member is no voter to count on, whatever its health: it may be the member of a Machine that
// is coming up, or going away, on a node nobody watches. KubeadmControlPlane counts unmatched
// members as healthy voters instead, which lets a removal take quorum with it.
func (s *scope) quorumWithout(m *clusterv1.Machine) (bool, string) {
	member := s.etcd.memberOf(m)
	if orphans := s.etcd.orphans(); len(orphans) > 0 {
		if member == nil {
			return false, fmt.Sprintf("Machine %s matches no etcd member, but etcd member(s) %s match no Machine: it may host one of them, so it is not removed until every member is matched to a Machine (its addresses or its Node name)",
				m.Name, memberNames(orphans))
		}
		return false, fmt.Sprintf("etcd member(s) %s match no Machine, so their votes are not counted on: no member leaves until every member is matched to a Machine (its addresses or its Node name) or removed",
			memberNames(orphans))
	}
	return s.targetQuorum(member, false)
}

// targetQuorum tells whether etcd keeps quorum after removing a member and/or adding one, and if
// not, why. A new member is assumed unhealthy (it may never start) unless etcd has at most one
// member, since a cluster could otherwise never grow from one to two. Learners block any change
// until they are promoted. The rule is etcd's failure tolerance
// (https://etcd.io/docs/v3.6/faq/#what-is-failure-tolerance), as KubeadmControlPlane applies it.
func (s *scope) targetQuorum(remove *etcdMember, add bool) (bool, string) {
	voting, unhealthy := 0, 0
	var sick []string
	if add {
		voting++
		if len(s.etcd.members) > 1 {
			unhealthy++
			sick = append(sick, "the new member (worst case)")
		}
	}
	for _, m := range s.etcd.members {
		if remove != nil && m.ID == remove.ID {
			continue
		}
		if m.IsLearner {
			return false, fmt.Sprintf("etcd member %s is a learner; wait for its promotion", m)
		}
		voting++
		if !m.healthy() {
			unhealthy++
			sick = append(sick, m.String())
		}
	}
	quorum := voting/2 + 1
	if voting-unhealthy >= quorum {
		return true, ""
	}
	return false, fmt.Sprintf("%d of %d voting members would be healthy, %d needed (unhealthy: %s)",
		voting-unhealthy, voting, quorum, strings.Join(sick, ", "))
}

func dedupe(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// machinesWithDeleteAnnotation are the Machines a user marked for deletion first.
func machinesWithDeleteAnnotation(ms []*clusterv1.Machine) []*clusterv1.Machine {
	var out []*clusterv1.Machine
	for _, m := range ms {
		if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			out = append(out, m)
		}
	}
	return out
}
