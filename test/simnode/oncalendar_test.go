package simnode

import (
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// The timers the renderer writes (syntax.Cron.OnCalendar) elapse when the cron expression they
// come from is due, and what the simulation does not read is refused.
func TestTimerCalendar(t *testing.T) {
	from := time.Date(2026, 11, 29, 12, 34, 56, 0, time.UTC)
	for _, expr := range []string{"* * * * *", "0 */6 * * *", "15 2 * * 1,3", "0 0 1 */3 *", "30 4 29 2 *"} {
		c, err := syntax.ParseCron(expr)
		if err != nil {
			t.Fatal(err)
		}
		cal, unit, err := parseTimer("/etc/systemd/system/x.timer", "[Timer]\nOnCalendar="+c.OnCalendar()+"\n")
		if err != nil || unit != "x.service" {
			t.Fatalf("%s (%s): %v, unit %q", expr, c.OnCalendar(), err, unit)
		}
		at := from
		for range 3 {
			want := c.Next(at)
			if got := cal.Next(at); !got.Equal(want) {
				t.Errorf("%s: OnCalendar=%s elapses at %s after %s, cron at %s", expr, c.OnCalendar(), got, at, want)
			}
			at = want
		}
	}
	for _, bad := range []string{"daily", "*-*-* 00/6:00:00", "Mon..Fri *-*-* 00:00:00", "2026-*-* 00:00:00"} {
		if _, _, err := parseTimer("/x.timer", "OnCalendar="+bad+"\n"); err == nil {
			t.Errorf("OnCalendar=%s was read", bad)
		}
	}
}

// Retention keeps the newest by the unix time at the end of the name, with or without .tar.gz.
func TestPruned(t *testing.T) {
	got := pruned([]string{"f/a-n-100", "f/a-n-300.tar.gz", "f/a-n-200", "f/a-n-50"}, 2)
	if strings.Join(got, " ") != "f/a-n-100 f/a-n-50" {
		t.Errorf("pruned %q", got)
	}
	if got := pruned([]string{"a-n-1"}, 2); got != nil {
		t.Errorf("pruned %q", got)
	}
}
