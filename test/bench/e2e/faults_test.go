package e2e_test

import (
	"os"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
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
				// A leader killed without releasing its lease: the other waits until the lease
				// expires, then acquires it. client-go's leader elector renews every RetryPeriod
				// but a standby polls every RetryPeriod to (1+JitterFactor) times it
				// (tools/leaderelection: wait.JitterUntil in acquire), and it counts the lease
				// duration from when it saw the last renewal: up to one poll late, then up to one
				// poll after expiry (12.4 s with these options).
				poll := time.Duration((1 + leaderelection.JitterFactor) * float64(o.RetryPeriod))
				if limit := o.LeaseDuration + 2*poll; res.Takeover > limit {
					t.Errorf("the standby took over after %s, want at most %s", res.Takeover, limit)
				}
			}
			if t.Failed() && res.WorkDir != "" {
				t.Logf("managers' logs kept in %s", res.WorkDir)
			}
			t.Logf("%s: killed with %d of %d ready and %d configs between their data and their token, all %d ready after; takeover %s", tc.fault, res.ReadyWhenKilled, stormN, res.BetweenWrites, res.Ready, res.Takeover)
		})
	}
}
