package reports

import (
	"fmt"
	"math"
	"time"
)

// ClockSample is one exchange with a shard: Sent and Received on the
// driver's Collector clock (Collector.Now) around the request, Remote the
// shard's Collector clock read while serving it.
type ClockSample struct{ Sent, Remote, Received time.Time }

// ClockMeasurement is one estimate of a shard's clock against the driver's:
// from the sample with the smallest round trip (as NTP's clock filter picks
// it: the one least delayed on the way, hence least asymmetric), offset =
// Remote - (Sent+Received)/2, the shard's clock minus the driver's, and
// uncertainty = half that round trip: the true offset is within it, however
// the round trip split between the two ways.
type ClockMeasurement struct {
	// At is on the driver's clock: the midpoint of the chosen sample.
	At time.Time `json:"at"`
	// OffsetSeconds is the shard's clock minus the driver's, in seconds
	// (nanoseconds kept).
	OffsetSeconds float64 `json:"offsetSeconds"`
	// UncertaintySeconds is half the chosen sample's round trip.
	UncertaintySeconds float64 `json:"uncertaintySeconds"`
	// Samples is how many exchanges the measurement chose from.
	Samples int `json:"samples"`
}

// MeasureClock estimates a shard's clock from samples of exchanges with it.
// It is an error to give no samples, or one received before it was sent (its
// times are not of one clock).
func MeasureClock(samples []ClockSample) (ClockMeasurement, error) {
	if len(samples) == 0 {
		return ClockMeasurement{}, fmt.Errorf("measuring a shard's clock: no samples; exchange with the shard at least once")
	}
	best := -1
	var bestRTT time.Duration
	for i, s := range samples {
		rtt := s.Received.Sub(s.Sent)
		if rtt < 0 {
			return ClockMeasurement{}, fmt.Errorf("measuring a shard's clock: sample %d was received (%s) %s before it was sent (%s); read Sent and Received from the same Collector's Now",
				i+1, s.Received.Format(time.RFC3339Nano), -rtt, s.Sent.Format(time.RFC3339Nano))
		}
		if best < 0 || rtt < bestRTT {
			best, bestRTT = i, rtt
		}
	}
	s := samples[best]
	mid := s.Sent.Add(bestRTT / 2)
	return ClockMeasurement{
		At:                 wallTime(mid),
		OffsetSeconds:      s.Remote.Sub(mid).Seconds(),
		UncertaintySeconds: (bestRTT / 2).Seconds(),
		Samples:            len(samples),
	}, nil
}

// offset is OffsetSeconds as a Duration, to the nanosecond.
func (m ClockMeasurement) offset() time.Duration { return secondsDuration(m.OffsetSeconds) }

// secondsDuration converts seconds to a Duration, rounding to the
// nanosecond: a float64 of seconds holds every nanosecond exactly up to
// about 100 days, but its product with 1e9 may fall just short of one.
func secondsDuration(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// ShardClock is what a run measured of one shard: its clock at the start
// and at the end of the load.
type ShardClock struct {
	// Shard names the shard and where it was reached, such as
	// "shard-0 (10.0.0.5:7070)".
	Shard string `json:"shard"`
	// Nodes is the number of nodes it ran.
	Nodes int `json:"nodes"`
	// Pods is the number of pods whose stamps were imported from it.
	Pods  int              `json:"pods"`
	Start ClockMeasurement `json:"start"`
	// End is zero when the shard's clock was not measured again after the
	// load.
	End ClockMeasurement `json:"end"`
}

// OffsetAt is the shard's clock minus the driver's at t on the driver's
// clock: interpolated linearly between Start and End by their At, and
// clamped to them outside; Start's alone when End.At is zero or not after
// Start.At (End's alone when only Start.At is zero).
func (s ShardClock) OffsetAt(t time.Time) time.Duration { return s.interpolate(t, false) }

// RemoteOffsetAt is OffsetAt for t on the shard's clock, as Collector.Import
// gives it: the same line, with its ends placed on the shard's clock
// (At+offset), which is exact for a linear drift. OffsetAt of a time on the
// shard's clock would be off by the drift times the offset: 50 µs for a
// clock 1 s off that drifts 50 ppm.
func (s ShardClock) RemoteOffsetAt(t time.Time) time.Duration { return s.interpolate(t, true) }

func (s ShardClock) interpolate(t time.Time, remote bool) time.Duration {
	o1, o2 := s.Start.offset(), s.End.offset()
	if s.Start.At.IsZero() && !s.End.At.IsZero() {
		return o2
	}
	if !s.driftMeasured() {
		return o1
	}
	a1, a2 := s.Start.At, s.End.At
	if remote {
		a1, a2 = a1.Add(o1), a2.Add(o2)
		if !a2.After(a1) { // a clock running backwards: no line to follow
			return o1
		}
	}
	switch {
	case !t.After(a1):
		return o1
	case !t.Before(a2):
		return o2
	}
	frac := float64(t.Sub(a1)) / float64(a2.Sub(a1))
	return o1 + time.Duration(math.Round(frac*float64(o2-o1)))
}

// driftMeasured says whether the shard's clock was measured twice, at two
// times.
func (s ShardClock) driftMeasured() bool {
	return !s.Start.At.IsZero() && !s.End.At.IsZero() && s.End.At.After(s.Start.At)
}

// DriftPPM is how fast the shard's clock ran against the driver's between
// Start and End: (End's offset - Start's) / (End.At - Start.At), in parts
// per million, positive when the shard's clock ran fast; 0 when not
// measurable (see OffsetAt).
func (s ShardClock) DriftPPM() float64 {
	if !s.driftMeasured() {
		return 0
	}
	return float64(s.End.offset()-s.Start.offset()) / float64(s.End.At.Sub(s.Start.At)) * 1e6
}

// maxAbsOffset is the largest offset of the shards' measurements, either
// way.
func maxAbsOffset(shards []ShardClock) time.Duration {
	var out time.Duration
	for _, s := range shards {
		for _, m := range []ClockMeasurement{s.Start, s.End} {
			if !m.At.IsZero() {
				out = max(out, m.offset().Abs())
			}
		}
	}
	return out
}
