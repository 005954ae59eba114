package framework

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSchedulerStartsLongestFirst: scenarios that arrive together start longest first, and no
// more than the capacity run at once (one here, so that the order is the order they ran in).
func TestSchedulerStartsLongestFirst(t *testing.T) {
	s := &Scheduler{Capacity: 1}
	// A test holds the only slot until the four have arrived, so that the order does not depend
	// on them all arriving within the Scheduler's gathering delay.
	releaseFirst := s.acquire(1000, "first")
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
	for arrived := 0; arrived < 4; {
		time.Sleep(10 * time.Millisecond)
		s.mu.Lock()
		arrived = len(s.waiting)
		s.mu.Unlock()
	}
	releaseFirst()
	wg.Wait()
	if got := strings.Join(order, " "); got != "longest long medium short" {
		t.Errorf("started in the order %s, want longest long medium short", got)
	}
	if most != 1 {
		t.Errorf("%d ran at once, want 1", most)
	}
}

// TestSchedulerExpectedSeconds: a subtest's own entry first, then its top-level test's, then a
// minute.
func TestSchedulerExpectedSeconds(t *testing.T) {
	s := &Scheduler{Seconds: map[string]int{"TestA": 100, "TestA/slow": 300}}
	for name, want := range map[string]int{"TestA/slow": 300, "TestA/fast": 100, "TestA": 100, "TestB/x": 60} {
		if got := s.expectedSeconds(name); got != want {
			t.Errorf("expectedSeconds(%q) = %d, want %d", name, got, want)
		}
	}
}
