package fakeruntime

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The pure part of resource usage: a UsageCurve resolved to numbers, its
// value, its integral and when it first reaches a limit, all as functions of
// the time since the container started. Like model.go, nothing here reads a
// clock or keeps state.

// bytesPerInode is the documented estimate of inodes from bytes, for image
// layers and writable layers alike: one inode per 16 KiB begun, between a
// busybox image (about 400 files in 4 MiB) and a distribution image (about
// 3,000 files in 75 MiB).
const bytesPerInode = 16 << 10

// curve is a UsageCurve resolved to plain numbers in its unit (bytes, cores
// or processes). A nil *curve is a resource the behaviour does not model.
type curve struct {
	start, perSecond float64
	max              float64 // +Inf: no cap
	steps            []curveStep
}

type curveStep struct {
	after time.Duration
	value float64
}

// resolveCurve resolves u, clamping negative levels to zero and sorting
// unsorted steps, as resolveModel corrects what Validate reports.
func resolveCurve(u *UsageCurve) *curve {
	if u == nil {
		return nil
	}
	c := &curve{max: math.Inf(1)}
	if u.Start != nil {
		c.start = max(u.Start.AsApproximateFloat64(), 0)
	}
	if u.PerSecond != nil {
		c.perSecond = u.PerSecond.AsApproximateFloat64()
	}
	if u.Max != nil {
		c.max = max(u.Max.AsApproximateFloat64(), 0)
	}
	c.steps = make([]curveStep, len(u.Steps))
	for i, s := range u.Steps {
		c.steps[i] = curveStep{after: max(time.Duration(s.After), 0), value: max(s.Value.AsApproximateFloat64(), 0)}
	}
	slices.SortStableFunc(c.steps, func(a, b curveStep) int { return cmp.Compare(a.after, b.after) })
	return c
}

func (c *curve) clamp(v float64) float64 { return min(max(v, 0), c.max) }

// at is the curve's value t after the start; 0 for a nil curve.
func (c *curve) at(t time.Duration) float64 {
	if c == nil {
		return 0
	}
	level, from := c.start, time.Duration(0)
	for _, s := range c.steps {
		if s.after > t {
			break
		}
		level, from = s.value, s.after
	}
	return c.clamp(level + c.perSecond*(t-from).Seconds())
}

// integral is the curve's integral from the start to t, in its unit times
// seconds (core-seconds for CPU), computed exactly segment by segment.
func (c *curve) integral(t time.Duration) float64 {
	if c == nil || t <= 0 {
		return 0
	}
	var sum float64
	level, from := c.start, time.Duration(0)
	for _, s := range c.steps {
		if s.after >= t {
			break
		}
		sum += c.segmentIntegral(level, (s.after - from).Seconds())
		level, from = s.value, s.after
	}
	return sum + c.segmentIntegral(level, (t-from).Seconds())
}

// segmentIntegral is the integral over [0, d] seconds of
// clamp(level + perSecond·x): a straight line that the clamp at 0 and at max
// cuts into at most three pieces, each either constant or linear.
func (c *curve) segmentIntegral(level, d float64) float64 {
	if d <= 0 {
		return 0
	}
	cuts := [4]float64{0}
	n := 1
	if c.perSecond != 0 {
		for _, bound := range [2]float64{0, c.max} {
			if x := (bound - level) / c.perSecond; x > 0 && x < d {
				cuts[n] = x
				n++
			}
		}
	}
	cuts[n] = d
	n++
	slices.Sort(cuts[:n])
	line := func(x float64) float64 { return level + c.perSecond*x }
	var sum float64
	for i := 1; i < n; i++ {
		u, v := cuts[i-1], cuts[i]
		switch mid := line((u + v) / 2); {
		case mid <= 0:
		case mid >= c.max:
			sum += c.max * (v - u)
		default:
			sum += (line(u) + line(v)) / 2 * (v - u)
		}
	}
	return sum
}

// reaches is the first time at or after from at which the curve passes
// limit: at once if a step (or the start) puts it above the limit, or the
// instant its growth reaches the limit, as the kernel kills a cgroup that
// cannot allocate past its limit. A curve that stays at or below the limit,
// or whose Max does, never reaches it.
func (c *curve) reaches(limit float64, from time.Duration) (time.Duration, bool) {
	if c == nil || c.max <= limit {
		return 0, false
	}
	level, segStart := c.start, time.Duration(0)
	for i := 0; i <= len(c.steps); i++ {
		segEnd := time.Duration(math.MaxInt64)
		if i < len(c.steps) {
			segEnd = c.steps[i].after
		}
		if segEnd > from && segEnd > segStart {
			u := max(segStart, from)
			if c.clamp(level+c.perSecond*(u-segStart).Seconds()) > limit {
				return u, true
			}
			if c.perSecond > 0 {
				// The line is at or below the limit at u and rises: it meets
				// the limit at segStart+x, which is no earlier than u.
				x := math.Ceil((limit - level) / c.perSecond * float64(time.Second))
				if x < float64(segEnd-segStart) {
					return max(segStart+time.Duration(x), u), true
				}
			}
		}
		if i < len(c.steps) {
			level, segStart = c.steps[i].value, c.steps[i].after
		}
	}
	return 0, false
}

// inodes is the estimate of the inodes that bytes of files take.
func inodes(bytes uint64) uint64 { return (bytes + bytesPerInode - 1) / bytesPerInode }
