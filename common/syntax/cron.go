package syntax

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed five-field cron expression (minute, hour, day of month, month, day of week)
// in the grammar that both consumers of an etcd snapshot schedule accept: k3s, which parses
// --etcd-snapshot-schedule-cron with robfig/cron's standard parser, and systemd timers, to
// which the k0s document converts it (OnCalendar). Each field is "*" or a comma-separated list
// of numbers, ranges (a-b) and steps (*/n, a-b/n). Names (MON, JAN), descriptors (@daily) and
// "a/n" are refused: not every parser reads them alike. Day of week is 0-6, 0 being Sunday.
type Cron struct {
	expr string
	// fields holds the allowed values of each field as a bit set, and whether it was "*".
	fields [5]cronField
}

type cronField struct {
	bits uint64
	star bool
}

type cronBounds struct {
	name     string
	min, max int
}

var cronFieldBounds = [5]cronBounds{
	{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 6},
}

const (
	cronMinute = iota
	cronHour
	cronDom
	cronMonth
	cronDow
)

// ParseCron parses a schedule. Its errors say what is wrong and how to write it instead.
func ParseCron(expr string) (*Cron, error) {
	parts := strings.Fields(expr)
	if len(parts) != 5 {
		return nil, fmt.Errorf("has %d fields, want 5 (minute hour day-of-month month day-of-week), for example \"0 */12 * * *\"", len(parts))
	}
	c := &Cron{expr: strings.Join(parts, " ")}
	for i, p := range parts {
		f, err := parseCronField(p, cronFieldBounds[i])
		if err != nil {
			return nil, fmt.Errorf("%s field %q: %w", cronFieldBounds[i].name, p, err)
		}
		c.fields[i] = f
	}
	if !c.fields[cronDom].star && !c.fields[cronDow].star {
		// cron fires when either matches, systemd only when both do: the k0s timer would not
		// fire when k3s does.
		return nil, fmt.Errorf("restricts both day of month and day of week, which cron and systemd timers read differently (either, both): set one of them to *")
	}
	return c, nil
}

func parseCronField(s string, b cronBounds) (cronField, error) {
	if s == "*" {
		return cronField{bits: rangeBits(b.min, b.max, 1), star: true}, nil
	}
	var f cronField
	for _, item := range strings.Split(s, ",") {
		rng, step := item, 1
		if i := strings.IndexByte(item, '/'); i >= 0 {
			n, err := strconv.Atoi(item[i+1:])
			if err != nil || n < 1 || n > b.max {
				return f, fmt.Errorf("step %q must be a number from 1 to %d", item[i+1:], b.max)
			}
			rng, step = item[:i], n
			if rng != "*" && !strings.Contains(rng, "-") {
				return f, fmt.Errorf("write a step over a range (%s-%d/%d) or over * (*/%d): %q is read differently by cron implementations", rng, b.max, n, n, item)
			}
		}
		lo, hi := b.min, b.max
		if rng != "*" {
			a, z, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = cronNumber(a, b); err != nil {
				return f, err
			}
			hi = lo
			if isRange {
				if hi, err = cronNumber(z, b); err != nil {
					return f, err
				}
				if hi < lo {
					return f, fmt.Errorf("range %q goes backwards", rng)
				}
			}
		}
		f.bits |= rangeBits(lo, hi, step)
	}
	return f, nil
}

func cronNumber(s string, b cronBounds) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%q is not a number from %d to %d (names such as MON or JAN are not accepted)", s, b.min, b.max)
	}
	if n < b.min || n > b.max {
		return 0, fmt.Errorf("%d is out of range %d-%d", n, b.min, b.max)
	}
	return n, nil
}

func rangeBits(lo, hi, step int) uint64 {
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << uint(v)
	}
	return bits
}

// String is the expression with single spaces, as k3s receives it.
func (c *Cron) String() string { return c.expr }

func (c *Cron) has(field, v int) bool { return c.fields[field].bits&(1<<uint(v)) != 0 }

// values lists a field's values in order.
func (c *Cron) values(field int) []int {
	var out []int
	for v := cronFieldBounds[field].min; v <= cronFieldBounds[field].max; v++ {
		if c.has(field, v) {
			out = append(out, v)
		}
	}
	return out
}

// OnCalendar is the schedule as a systemd.time(7) calendar event, "[weekdays ]*-months-days
// hours:minutes:00", each restricted field an explicit list (systemd accepts lists in every
// component; expanding ranges and steps avoids systemd's own, differently defined repetition
// syntax).
func (c *Cron) OnCalendar() string {
	list := func(field int) string {
		if c.fields[field].star {
			return "*"
		}
		vals := c.values(field)
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprintf("%02d", v)
		}
		return strings.Join(parts, ",")
	}
	var s strings.Builder
	if !c.fields[cronDow].star {
		days := [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
		vals := c.values(cronDow)
		names := make([]string, len(vals))
		for i, v := range vals {
			names[i] = days[v]
		}
		s.WriteString(strings.Join(names, ",") + " ")
	}
	s.WriteString("*-" + list(cronMonth) + "-" + list(cronDom) + " " + list(cronHour) + ":" + list(cronMinute) + ":00")
	return s.String()
}

// Next returns the first scheduled time strictly after t, in t's location, or the zero time
// when the schedule never fires within eight years (a 31st of February).
func (c *Cron) Next(t time.Time) time.Time {
	t = t.Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(8, 0, 0)
	for t.Before(limit) {
		switch {
		case !c.has(cronMonth, int(t.Month())):
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, t.Location())
		case !c.has(cronDom, t.Day()) || !c.has(cronDow, int(t.Weekday())):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, t.Location())
		case !c.has(cronHour, t.Hour()):
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, t.Location())
		case !c.has(cronMinute, t.Minute()):
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}
