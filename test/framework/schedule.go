package framework

import (
	"flag"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Scheduler runs a package's parallel tests longest first, at most Capacity at a time. go test
// admits parallel tests in no set order (the tests it releases together race for its slots): in
// measured runs the longest tests started last and the package ended with one or two of them
// running on an otherwise idle machine for minutes. So TestMain raises go test's own limit
// above the number of tests (TakeParallelFlag) and every test takes a slot of the Scheduler
// instead (Parallel), which hands them out by expected duration.
type Scheduler struct {
	// Capacity is how many tests hold a slot at once (at least one).
	Capacity int
	// Seconds are the expected durations of the longest tests, measured with
	// hack/test-times.sh, keyed by the test's full name (a subtest: "TestX/k0s") or by its
	// top-level test's name. Any other test counts as a minute. A stale or missing entry costs
	// wall time only: every test still runs.
	Seconds map[string]int

	mu      sync.Mutex
	running int
	waiting []*slotWaiter
	timer   *time.Timer
}

type slotWaiter struct {
	seconds int
	name    string
	granted chan struct{}
}

// goTestParallel is go test's own limit once a Scheduler bounds the package: above the number
// of parallel tests of any package, so that every one of them reaches the Scheduler.
const goTestParallel = 1000

// TakeParallelFlag sets the capacity to -test.parallel when it was given, to defaultCapacity
// otherwise, and raises go test's own limit so that the Scheduler alone bounds the package.
// TestMain calls it after flag.Parse.
func (s *Scheduler) TakeParallelFlag(defaultCapacity int) error {
	s.Capacity = defaultCapacity
	var err error
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			s.Capacity, err = strconv.Atoi(f.Value.String())
		}
	})
	if err != nil {
		return err
	}
	return flag.Set("test.parallel", strconv.Itoa(goTestParallel))
}

// Parallel is t.Parallel that also waits for one of the Scheduler's slots, held until the test
// and its cleanups are done. The wait is logged, because go test counts it in the test's time
// (test/cmd/testtimes subtracts it).
func (s *Scheduler) Parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	start := time.Now()
	t.Cleanup(s.acquire(s.expectedSeconds(t.Name()), t.Name()))
	if waited := time.Since(start); waited >= time.Second {
		t.Logf("waited %.1fs for a scenario slot", waited.Seconds())
	}
}

// expectedSeconds is how long the test named name is expected to take.
func (s *Scheduler) expectedSeconds(name string) int {
	if sec, ok := s.Seconds[name]; ok {
		return sec
	}
	top, _, _ := strings.Cut(name, "/")
	if sec, ok := s.Seconds[top]; ok {
		return sec
	}
	return 60
}

// gatherDelay is how long the Scheduler waits after a test arrives or ends before it grants a
// slot: the tests go test releases together arrive within milliseconds of each other, and all
// of them must be waiting for the longest to be picked first.
const gatherDelay = 300 * time.Millisecond

// acquire blocks until a slot is granted and returns the function that gives it back.
func (s *Scheduler) acquire(seconds int, name string) (release func()) {
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
func (s *Scheduler) schedule() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(gatherDelay, s.grant)
}

func (s *Scheduler) grant() {
	s.mu.Lock()
	defer s.mu.Unlock()
	sort.SliceStable(s.waiting, func(i, j int) bool {
		if s.waiting[i].seconds != s.waiting[j].seconds {
			return s.waiting[i].seconds > s.waiting[j].seconds
		}
		return s.waiting[i].name < s.waiting[j].name
	})
	for s.running < max(s.Capacity, 1) && len(s.waiting) > 0 {
		s.running++
		close(s.waiting[0].granted)
		s.waiting = s.waiting[1:]
	}
}
