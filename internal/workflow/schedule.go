package workflow

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed schedule expression: a 5-field cron line (minute hour day month
// weekday, with *, lists, ranges and steps), "@every <duration>" (at least 1 s), @hourly or
// @daily. Validation and the orchestrator's scheduler use the same one.
type Schedule struct {
	every  time.Duration
	fields [5]uint64 // the values each cron field matches, as bits
}

// cronFields are the cron fields' names and ranges.
var cronFields = [5]struct {
	name   string
	lo, hi int
}{{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 6}}

// ParseSchedule parses a schedule expression, or says what is wrong with it.
func ParseSchedule(s string) (*Schedule, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "@hourly":
		s = "0 * * * *"
	case s == "@daily":
		s = "0 0 * * *"
	case strings.HasPrefix(s, "@every "):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s, "@every ")))
		if err != nil || d < time.Second {
			return nil, fmt.Errorf("schedule %q: @every needs a duration of at least 1s, like @every 1m", s)
		}
		return &Schedule{every: d}, nil
	case strings.HasPrefix(s, "@"):
		return nil, fmt.Errorf("schedule %q: the shorthands are @every <duration>, @hourly and @daily", s)
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return nil, fmt.Errorf("schedule %q: a cron schedule has 5 fields (minute hour day month weekday), this one %d", s, len(fields))
	}
	sc := &Schedule{}
	for i, f := range fields {
		bits, err := parseCronField(f, cronFields[i].lo, cronFields[i].hi)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %s field %q: %v", s, cronFields[i].name, f, err)
		}
		sc.fields[i] = bits
	}
	return sc, nil
}

// CheckSchedule reports what is wrong with a schedule expression, or nil.
func CheckSchedule(s string) error {
	_, err := ParseSchedule(s)
	return err
}

// parseCronField reads one field: a comma list of *, n, a-b, each optionally /step.
func parseCronField(f string, lo, hi int) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(f, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("step %q is not a positive number", stepS)
			}
			step = n
		}
		from, to := lo, hi
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			x, err := strconv.Atoi(a)
			if err != nil || x < lo || x > hi {
				return 0, fmt.Errorf("%q is not a number in %d..%d", a, lo, hi)
			}
			from, to = x, x
			if hasStep {
				to = hi // n/step: from n to the end of the range
			}
			if isRange {
				y, err := strconv.Atoi(b)
				if err != nil || y < lo || y > hi {
					return 0, fmt.Errorf("%q is not a number in %d..%d", b, lo, hi)
				}
				if x > y {
					return 0, fmt.Errorf("range %s runs backwards", rng)
				}
				to = y
			}
		}
		for v := from; v <= to; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

// Next returns the first time after now the schedule fires (the zero time when it never
// does within a year, as "0 0 31 2 *" would).
func (s *Schedule) Next(now time.Time) time.Time {
	if s.every > 0 {
		return now.Add(s.every)
	}
	t := now.Truncate(time.Minute).Add(time.Minute)
	for range 366 * 24 * 60 { // a year of minutes at most
		if s.fields[0]&(1<<t.Minute()) != 0 && s.fields[1]&(1<<t.Hour()) != 0 && s.fields[2]&(1<<t.Day()) != 0 &&
			s.fields[3]&(1<<int(t.Month())) != 0 && s.fields[4]&(1<<int(t.Weekday())) != 0 {
			return t
		}
		t = t.Add(time.Minute)
	}
	return time.Time{}
}
