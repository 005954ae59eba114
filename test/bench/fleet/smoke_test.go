package fleetbench_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	fleetbench "github.com/kairos-capi/kairos-capi/test/bench/fleet"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// smokeN is small: make test's budget is tight, and correctness does not need a fleet.
const smokeN = 10

// TestSmoke runs `make bench-fleet` at N=10 (k0s and k3s, every other one) and checks correctness
// only, never time: every cluster becomes ready, the requests counted outside the managers (the
// management proxies, the fleet) agree with the managers' own client metrics, no workload request
// is refused, and in steady state over a window that holds a resync of every object neither
// manager writes anything, to either side. The sync period is shortened to 5 s through the
// benchmark's -sync-period (make bench-fleet runs the default), so that the window holds a resync
// in 12 s. Every wait is for a state (ready, quiet), bounded only by generous timeouts.
func TestSmoke(t *testing.T) {
	start := time.Now()
	res, err := fleetbench.Run(framework.Context(t), fleetbench.Options{
		N:            smokeN,
		Distribution: "mixed",
		// A 5 s sync period and a 12 s window (more than 1.1 periods: every informer resyncs
		// inside it, whatever client-go's jitter) keep the test short: its CPU is mostly the API
		// server's and the managers' idle cost, which grows with the wall time.
		SyncPeriod: 5 * time.Second,
		Window:     12 * time.Second,
		Quiet:      5 * time.Second,
		// Node (etcd) addresses of its own: test/fleet's tests use 127.100.x, make bench-fleet
		// 127.102.x, and either may run beside this test.
		FirstNodeAddress: netip.AddrFrom4([4]byte{127, 103, 0, 1}),
		Logf:             t.Logf,
	})
	if res != nil {
		defer func() {
			if t.Failed() || testing.Verbose() {
				var b bytes.Buffer
				fleetbench.WriteTable(&b, []*fleetbench.Result{res})
				fleetbench.WriteDetails(&b, []*fleetbench.Result{res})
				t.Logf("benchmark run (%s):\n%s", time.Since(start).Round(time.Second), b.String())
			}
		}()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
	if res.Ready != smokeN {
		t.Fatalf("%d of %d clusters ready", res.Ready, smokeN)
	}
	if res.Unauthorized != 0 {
		t.Errorf("%d workload requests refused with 401", res.Unauthorized)
	}
	for _, m := range fleetbench.Managers {
		ms := res.Managers[m]
		// The counts are only worth something if what was counted outside is what was sent.
		x := ms.WholeRun
		if x.ManagementWrites != x.ManagementClientWrites {
			t.Errorf("%s: the proxy counted %d management writes, the manager's client metrics %d", m, x.ManagementWrites, x.ManagementClientWrites)
		}
		if x.WorkloadWrites != x.WorkloadClientWrites {
			t.Errorf("%s: the fleet counted %d workload writes, the manager's client metrics %d", m, x.WorkloadWrites, x.WorkloadClientWrites)
		}
		// Reads too, up to the requests in flight while both counts were read (a manager has at
		// most a few per cluster at once: its reconciles' reads and the ClusterCache's probe).
		if d := x.WorkloadRequests - x.WorkloadClientRequests; d < -2*smokeN || d > 2*smokeN || x.WorkloadRequests == 0 {
			t.Errorf("%s: the fleet counted %d workload requests, the manager's client metrics %d", m, x.WorkloadRequests, x.WorkloadClientRequests)
		}
		// A window without a resync would prove nothing.
		if ms.Reconciles < smokeN {
			t.Errorf("%s: %d reconciles in the window, want at least %d (a resync of every object)", m, ms.Reconciles, smokeN)
		}
		if w := ms.Management.Writes - ms.ManagementLeases; w != 0 {
			t.Errorf("%s: %d management writes in steady state, want 0: %v", m, w, ms.Management.Breakdown)
		}
		if ms.Workload.Writes != 0 {
			t.Errorf("%s: %d workload writes in steady state (%d changed nothing), want 0", m, ms.Workload.Writes, ms.Workload.NoOpWrites)
		}
	}
}
