package workflow

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CheckSchedule checks a schedule expression: a 5-field cron line (minute hour day month
// weekday, with *, lists, ranges and steps), "@every <duration>" (at least 1 s), @hourly or
// @daily.
func CheckSchedule(s string) error {
	s = strings.TrimSpace(s)
	switch {
	case s == "@hourly" || s == "@daily":
		return nil
	case strings.HasPrefix(s, "@every "):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s, "@every ")))
		if err != nil || d < time.Second {
			return fmt.Errorf("schedule %q: @every needs a duration of at least 1s, like @every 1m", s)
		}
		return nil
	case strings.HasPrefix(s, "@"):
		return fmt.Errorf("schedule %q: the shorthands are @every <duration>, @hourly and @daily", s)
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return fmt.Errorf("schedule %q: a cron schedule has 5 fields (minute hour day month weekday), this one %d", s, len(fields))
	}
	limits := [5][2]int{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}
	names := [5]string{"minute", "hour", "day of month", "month", "day of week"}
	for i, f := range fields {
		if err := checkCronField(f, limits[i][0], limits[i][1]); err != nil {
			return fmt.Errorf("schedule %q: %s field %q: %v", s, names[i], f, err)
		}
	}
	return nil
}

func checkCronField(f string, lo, hi int) error {
	for _, part := range strings.Split(f, ",") {
		rng, step, hasStep := strings.Cut(part, "/")
		if hasStep {
			if n, err := strconv.Atoi(step); err != nil || n < 1 {
				return fmt.Errorf("step %q is not a positive number", step)
			}
		}
		if rng == "*" {
			continue
		}
		a, b, isRange := strings.Cut(rng, "-")
		for _, v := range []string{a, b} {
			if v == "" && (!isRange && v == b) {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				return fmt.Errorf("%q is not a number in %d..%d", v, lo, hi)
			}
		}
		if isRange {
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			if x > y {
				return fmt.Errorf("range %s runs backwards", rng)
			}
		}
	}
	return nil
}
