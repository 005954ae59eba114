package simnode

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// calendar is a systemd.time(7) calendar event of the form the simulation's timers use:
// "[Weekday[,Weekday...] ]*-Month-Day Hour:Minute:Second", each of Month, Day, Hour, Minute and
// Second "*" or a comma-separated list of numbers (systemd accepts lists in every component).
// Ranges, repetitions ("/"), years and time zones are systemd's too but not read here: a timer
// that uses them is refused with a message, not misread.
type calendar struct {
	weekdays                                uint8 // bit per time.Weekday; 0 means any
	months, days, hours, minutes, seconds   uint64
	anyMonth, anyDay, anyHour, anyMin, anyS bool
}

// parseTimer reads a timer unit: its OnCalendar= event and the service it starts (Unit=, by
// default the timer's own name with .service, systemd.timer(5)).
func parseTimer(unitPath, content string) (*calendar, string, error) {
	var event string
	unit := strings.TrimSuffix(path.Base(unitPath), ".timer") + ".service"
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "OnCalendar="); ok {
			if event != "" {
				return nil, "", errors.New("more than one OnCalendar= (the simulation reads one)")
			}
			event = v
		}
		if v, ok := strings.CutPrefix(line, "Unit="); ok {
			unit = strings.TrimSpace(v)
		}
	}
	if event == "" {
		return nil, "", errors.New("no OnCalendar=")
	}
	c, err := parseCalendar(event)
	if err != nil {
		return nil, "", fmt.Errorf("OnCalendar=%s: %w", event, err)
	}
	return c, unit, nil
}

var weekdayNames = map[string]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

func parseCalendar(s string) (*calendar, error) {
	f := strings.Fields(s)
	c := &calendar{}
	if len(f) == 3 {
		for _, d := range strings.Split(f[0], ",") {
			wd, ok := weekdayNames[d]
			if !ok {
				return nil, fmt.Errorf("weekday %q is not one of Mon..Sun", d)
			}
			c.weekdays |= 1 << uint(wd)
		}
		f = f[1:]
	}
	if len(f) != 2 {
		return nil, errors.New("not \"[weekdays ]*-month-day hour:minute:second\"")
	}
	date := strings.Split(f[0], "-")
	clock := strings.Split(f[1], ":")
	if len(date) != 3 || date[0] != "*" || len(clock) != 3 {
		return nil, errors.New("not \"[weekdays ]*-month-day hour:minute:second\"")
	}
	var err error
	for _, x := range []struct {
		text     string
		bits     *uint64
		any      *bool
		min, max int
	}{
		{date[1], &c.months, &c.anyMonth, 1, 12}, {date[2], &c.days, &c.anyDay, 1, 31},
		{clock[0], &c.hours, &c.anyHour, 0, 23}, {clock[1], &c.minutes, &c.anyMin, 0, 59}, {clock[2], &c.seconds, &c.anyS, 0, 59},
	} {
		if x.text == "*" {
			*x.any = true
			continue
		}
		for _, v := range strings.Split(x.text, ",") {
			var n int
			if n, err = strconv.Atoi(v); err != nil || n < x.min || n > x.max {
				return nil, fmt.Errorf("%q is not a number from %d to %d", v, x.min, x.max)
			}
			*x.bits |= 1 << uint(n)
		}
	}
	return c, nil
}

func (c *calendar) match(bits uint64, anyV bool, v int) bool { return anyV || bits&(1<<uint(v)) != 0 }

// Next is the first time after t the event elapses, in t's location (the node's time zone, as
// systemd's default), or the zero time within eight years.
func (c *calendar) Next(t time.Time) time.Time {
	t = t.Truncate(time.Second).Add(time.Second)
	limit := t.AddDate(8, 0, 0)
	for t.Before(limit) {
		switch {
		case !c.match(c.months, c.anyMonth, int(t.Month())):
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, t.Location())
		case !c.match(c.days, c.anyDay, t.Day()) || (c.weekdays != 0 && c.weekdays&(1<<uint(t.Weekday())) == 0):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, t.Location())
		case !c.match(c.hours, c.anyHour, t.Hour()):
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, t.Location())
		case !c.match(c.minutes, c.anyMin, t.Minute()):
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute()+1, 0, 0, t.Location())
		case !c.match(c.seconds, c.anyS, t.Second()):
			t = t.Add(time.Second)
		default:
			return t
		}
	}
	return time.Time{}
}
