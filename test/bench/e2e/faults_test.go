package e2e_test

import (
	"os"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kairos-capi/kairos-capi/test/bench/e2e"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

func TestMain(m *testing.M) {
	// The API servers the runs start log through controller-runtime.
	ctrl.SetLogger(framework.Logger())
	os.Exit(m.Run())
}

// stormN is the storm the issue asks the bootstrap manager to survive a kill in.
const stormN = 200

// TestStormSurvivesFaults kills the bootstrap manager with SIGKILL in the middle of a storm of
// 200 worker configs, alone (then restarted) and as the leader of two replicas (the other takes
// over): every config ends ready with exactly one data Secret, written once, and exactly one
// live join token, the one its data holds.
func TestStormSurvivesFaults(t *testing.T) {
	for _, tc := range []struct {
		fault e2e.Fault
	}{{e2e.FaultKill}, {e2e.FaultLeaderLoss}} {
		t.Run(string(tc.fault), func(t *testing.T) {
			o := e2e.StormOptions{N: stormN, Fault: tc.fault, Logf: t.Logf,
				LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}
			res, err := e2e.RunStorm(framework.Context(t), o)
			if err != nil {
				t.Fatal(err)
			}
			// The kill comes while join token create N/3+1 waits (RunStorm's default KillAt): a
			// config is ready only once its token exists, so at most N/3 are.
			if res.ReadyWhenKilled > stormN/3 {
				t.Fatalf("%d configs were ready when token create %d arrived: a config was ready before its token existed", res.ReadyWhenKilled, stormN/3+1)
			}
			if res.BetweenWrites < 1 {
				t.Fatalf("the kill came with %d configs ready and %d between their data and their token: it proves nothing", res.ReadyWhenKilled, res.BetweenWrites)
			}
			if res.Ready != stormN {
				t.Errorf("%d of %d configs ready", res.Ready, stormN)
			}
			for _, p := range res.Problems {
				t.Error(p)
			}
			if tc.fault == e2e.FaultLeaderLoss {
				checkTakeover(t, o, res)
			}
			if t.Failed() && res.WorkDir != "" {
				t.Logf("managers' logs kept in %s", res.WorkDir)
			}
			t.Logf("%s: killed with %d of %d ready and %d configs between their data and their token, all %d ready after; takeover %s", tc.fault, res.ReadyWhenKilled, stormN, res.BetweenWrites, res.Ready, res.Takeover)
		})
	}
}

// checkTakeover checks, from the leader election Lease the managers wrote, that the standby took
// the lease over from the killed leader with the lease duration the manager was given, and only
// once the lease had expired: client-go's leader elector acquires a lease when it has seen no
// renewal for the lease duration (tools/leaderelection: tryAcquireOrRenew), and it counts that
// from when it observed the last renewal, which is never before the leader made it. The wall
// time of the takeover is only logged: it depends on the machine's speed (client-go's own
// worst case, one poll late and one poll after expiry, was all but reached on a loaded 2-core
// machine).
func checkTakeover(t *testing.T, o e2e.StormOptions, res *e2e.StormResult) {
	t.Helper()
	before, after := res.Killed, res.Acquired
	if before == nil || after == nil {
		t.Fatal("the leader election Lease was not read")
	}
	holder := func(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }
	if holder(after) == "" || holder(after) == holder(before) {
		t.Errorf("the Lease is held by %q after the takeover, by %q when its leader was killed", holder(after), holder(before))
	}
	if got := time.Duration(ptr.Deref(after.Spec.LeaseDurationSeconds, 0)) * time.Second; got != o.LeaseDuration {
		t.Errorf("the Lease's duration is %s, the managers were given %s", got, o.LeaseDuration)
	}
	if before.Spec.RenewTime == nil || after.Spec.AcquireTime == nil {
		t.Fatalf("the Lease has no renew time before the takeover (%v) or no acquire time after it (%v)", before.Spec.RenewTime, after.Spec.AcquireTime)
	}
	if gap := after.Spec.AcquireTime.Sub(before.Spec.RenewTime.Time); gap < o.LeaseDuration {
		t.Errorf("the standby acquired the Lease %s after the killed leader's last renewal, before the lease duration (%s) ran out", gap, o.LeaseDuration)
	}
	if ptr.Deref(after.Spec.LeaseTransitions, 0) != ptr.Deref(before.Spec.LeaseTransitions, 0)+1 {
		t.Errorf("the Lease changed hands %d times, want once", ptr.Deref(after.Spec.LeaseTransitions, 0)-ptr.Deref(before.Spec.LeaseTransitions, 0))
	}
}
