package syntax

import (
	"strings"
	"testing"
	"time"
)

func TestParseCronOnCalendar(t *testing.T) {
	for expr, want := range map[string]string{
		// k3s' default: 00:00 and 12:00.
		"0 */12 * * *": "*-*-* 00,12:00:00",
		// k3s' documented example, every 5 hours.
		"0 */5 * * *":       "*-*-* 00,05,10,15,20:00:00",
		"30 2 * * 1-5":      "Mon,Tue,Wed,Thu,Fri *-*-* 02:30:00",
		"0-30/10 3 1 1,7 *": "*-01,07-01 03:00,10,20,30:00",
		"  15  4 * * 0 ":    "Sun *-*-* 04:15:00",
		"* * * * *":         "*-*-* *:*:00",
	} {
		c, err := ParseCron(expr)
		if err != nil {
			t.Errorf("%q: %v", expr, err)
			continue
		}
		if got := c.OnCalendar(); got != want {
			t.Errorf("%q: OnCalendar %q, want %q", expr, got, want)
		}
	}
}

func TestParseCronRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		"0 */12 * *":   "has 4 fields, want 5",
		"@daily":       "has 1 fields",
		"0 0 1 * 1":    "restricts both day of month and day of week",
		"60 * * * *":   "minute field \"60\": 60 is out of range 0-59",
		"0 0 * JAN *":  "names such as MON or JAN are not accepted",
		"5/10 * * * *": "write a step over a range (5-59/10) or over * (*/10)",
		"0 */0 * * *":  "step \"0\" must be a number from 1 to 23",
		"0 5-2 * * *":  "range \"5-2\" goes backwards",
		"0 0 * * 7":    "7 is out of range 0-6",
		"0 0 0 * *":    "0 is out of range 1-31",
		"0 -1 * * *":   "is not a number",
		"0 0 * * 1,,2": "is not a number",
	} {
		_, err := ParseCron(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to contain %q", expr, err, want)
		}
	}
}

func TestCronNext(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct{ expr, from, want string }{
		{"0 */12 * * *", "2025-11-29T08:17:00Z", "2025-11-29T12:00:00Z"},
		// Strictly after: a time on the schedule gives the next one.
		{"0 */12 * * *", "2025-11-29T12:00:00Z", "2025-11-30T00:00:00Z"},
		{"0 */12 * * *", "2025-11-29T11:59:59Z", "2025-11-29T12:00:00Z"},
		{"30 2 * * 1-5", "2025-11-29T08:00:00Z", "2025-12-01T02:30:00Z"}, // Saturday to Monday
		{"0 0 29 2 *", "2025-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 31 2 *", "2025-03-01T00:00:00Z", "0001-01-01T00:00:00Z"}, // never
		{"*/15 * * * *", "2025-12-31T23:59:00Z", "2026-01-01T00:00:00Z"},
	} {
		c, err := ParseCron(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Next(at(tc.from)); !got.Equal(at(tc.want)) {
			t.Errorf("%q after %s: %s, want %s", tc.expr, tc.from, got.Format(time.RFC3339), tc.want)
		}
	}
}
