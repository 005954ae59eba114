package e2e_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/test/bench/e2e"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// resyncMustWriteNothing makes TestSmoke fail when the Kairos manager writes anything during a
// resync window. It is false while the bootstrap reconciler still re-patches every pending join
// token on each reconcile (issue 11, item 2): until then the test reports the count in its log
// instead of failing. The fix of that item sets it to true.
const resyncMustWriteNothing = true

// smokeN is small enough for CI and large enough that the manager's rate limits matter.
const smokeN = 50

// TestSmoke runs the benchmark's Kairos column at N=50 and checks correctness only, never time:
// every config becomes ready with exactly one data Secret, the proxies' write counts agree with
// the manager's own client metrics, and a restarted manager writes nothing while its configs
// are ready and their nodes pending.
func TestSmoke(t *testing.T) {
	start := time.Now()
	res, err := e2e.Run(framework.Context(t), e2e.Options{
		N:         smokeN,
		Providers: []e2e.Provider{e2e.Kairos},
		// A sixth of the benchmark's 30s keeps the test inside CI's budget (a 16s window instead
		// of 71s): the window reaches 2.2 periods whatever the period (see e2e.ResyncWindow), so
		// two periodic resyncs still fall inside it, and both must write nothing.
		SyncPeriod: 5 * time.Second,
		Logf:       t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() || testing.Verbose() {
			var b bytes.Buffer
			res.WriteTable(&b)
			res.WriteDetails(&b)
			t.Logf("benchmark run (%s):\n%s", time.Since(start).Round(time.Second), b.String())
		}
	}()

	// Ready, each with exactly one data Secret, the one its status names; manager never exited.
	for _, p := range res.Problems() {
		t.Error(p)
	}
	k := res.Get(e2e.Kairos)
	if k.Ready != smokeN {
		t.Errorf("%d of %d configs ready", k.Ready, smokeN)
	}
	// The counts are only worth something if the proxy saw what the manager sent.
	for _, s := range []struct {
		name string
		side e2e.Side
	}{{"management", k.Management}, {"workload", k.Workload}} {
		if s.side.ClientWrites != s.side.Writes {
			t.Errorf("%s: the proxy counted %d writes, the manager's client metrics %d", s.name, s.side.Writes, s.side.ClientWrites)
		}
	}

	r := k.Resync
	if r == nil {
		t.Fatal("no resync window was measured")
	}
	// A window without a resync would prove nothing: a periodic resync must have reached every
	// config after the start-up reconciles.
	if periodic := r.Reconciles - r.StartupReconciles; periodic < smokeN {
		t.Errorf("only %d reconciles after start-up in the resync window, want at least %d (a resync of every config)", periodic, smokeN)
	}
	if r.Writes != 0 {
		if resyncMustWriteNothing {
			t.Errorf("the restarted Kairos manager wrote %d times in the resync window (%d at start-up, %d after), want 0: %v",
				r.Writes, r.StartupWrites, r.PeriodicWrites, r.Breakdown)
		} else {
			t.Logf("KNOWN ISSUE (issue 11, item 2; resyncMustWriteNothing is false): the restarted Kairos manager wrote %d times in the resync window (%d at start-up, %d after), want 0: %v",
				r.Writes, r.StartupWrites, r.PeriodicWrites, r.Breakdown)
		}
	}
}
