package lifecycle

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Scenarios run longest first, at most slots.capacity at a time. go test admits parallel tests
// in no set order (the tests released together race for its slots): in a measured run the two
// longest scenarios started last, and the package ended with one or two of them running on an
// otherwise idle machine for minutes. So go test's own limit is raised above the number of
// scenarios (TestMain) and every scenario takes a slot of this scheduler instead (parallel),
// which hands them out by expected duration.

// scenarioSeconds are the durations of the longest scenarios, measured with hack/test-times.sh
// (the slower distribution), so that they can start first. Any other scenario counts as a
// minute. A stale or missing entry costs wall time only: every scenario still runs.
var scenarioSeconds = map[string]int{
	"TestRestartMidRollout":                        420, // both distributions in turn, own manager
	"TestRollout":                                  415,
	"TestEtcdMemberDownBlocksRemovals":             375,
	"TestEtcdPartitionAndPowerOff":                 285,
	"TestHAScaleUpAndDown":                         235,
	"TestTwoUnhealthyMachinesRecover":              215,
	"TestUnmatchedEtcdMemberBlocksRemovals":        195,
	"TestHAControlPlaneUpgradesInPlace":            190,
	"TestVirtualIPSurvivesLosingItsHolder":         175,
	"TestAPIServerPortBehindLoadBalancer":          165,
	"TestRemediation":                              165,
	"TestWorkersUpgradeInPlace":                    160,
	"TestVanishedVMIsReplaced":                     150,
	"TestMachinePoolAddsNodeAfterJoinTokenExpired": 145,
	"TestSingleNodeUpgradesInPlace":                110,
	"TestPauseAndResume":                           105,
}

// expectedSeconds is how long the scenario named name (a test or one distribution's subtest) is
// expected to take.
func expectedSeconds(name string) int {
	top, _, _ := strings.Cut(name, "/")
	if s, ok := scenarioSeconds[top]; ok {
		return s
	}
	return 60
}

// slots is the package's scheduler; TestMain sets its capacity.
var slots = &scheduler{}

// parallel is t.Parallel for a scenario: it also waits for one of the package's scenario slots,
// held until the scenario and its cleanups are done. The wait is logged, because go test counts
// it in the test's time (hack/test-times.sh subtracts it).
func parallel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	t.Cleanup(slots.acquire(expectedSeconds(t.Name()), t.Name()))
	if waited := time.Since(start); waited >= time.Second {
		t.Logf("waited %.1fs for a scenario slot", waited.Seconds())
	}
}

// scheduler hands out capacity slots, longest expected scenario first.
type scheduler struct {
	mu       sync.Mutex
	capacity int
	running  int
	waiting  []*slotWaiter
	timer    *time.Timer
}

type slotWaiter struct {
	seconds int
	name    string
	granted chan struct{}
}

// gatherDelay is how long the scheduler waits after a scenario arrives or ends before it grants
// a slot: the scenarios go test releases together arrive within milliseconds of each other, and
// all of them must be waiting for the longest to be picked first.
const gatherDelay = 300 * time.Millisecond

// acquire blocks until a slot is granted and returns the function that gives it back.
func (s *scheduler) acquire(seconds int, name string) (release func()) {
	w := &slotWaiter{seconds: seconds, name: name, granted: make(chan struct{})}
	s.mu.Lock()
	s.waiting = append(s.waiting, w)
	s.schedule()
	s.mu.Unlock()
	<-w.granted
	return func() {
		s.mu.Lock()
		s.running--
		s.schedule()
		s.mu.Unlock()
	}
}

// schedule arms the grant timer (again); s.mu is held.
func (s *scheduler) schedule() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(gatherDelay, s.grant)
}

func (s *scheduler) grant() {
	s.mu.Lock()
	defer s.mu.Unlock()
	sort.SliceStable(s.waiting, func(i, j int) bool {
		if s.waiting[i].seconds != s.waiting[j].seconds {
			return s.waiting[i].seconds > s.waiting[j].seconds
		}
		return s.waiting[i].name < s.waiting[j].name
	})
	for s.running < max(s.capacity, 1) && len(s.waiting) > 0 {
		s.running++
		close(s.waiting[0].granted)
		s.waiting = s.waiting[1:]
	}
}

// TestSchedulerStartsLongestFirst: scenarios that arrive together start longest first, and no
// more than the capacity run at once (one here, so that the order is the order they ran in).
func TestSchedulerStartsLongestFirst(t *testing.T) {
	s := &scheduler{capacity: 1}
	var mu sync.Mutex
	var order []string
	running, most := 0, 0
	var wg sync.WaitGroup
	for _, w := range []struct {
		name    string
		seconds int
	}{{"short", 10}, {"long", 300}, {"medium", 100}, {"longest", 400}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := s.acquire(w.seconds, w.name)
			mu.Lock()
			order = append(order, w.name)
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			release()
		}()
	}
	wg.Wait()
	if got := strings.Join(order, " "); got != "longest long medium short" {
		t.Errorf("started in the order %s, want longest long medium short", got)
	}
	if most != 1 {
		t.Errorf("%d ran at once, want 1", most)
	}
}
