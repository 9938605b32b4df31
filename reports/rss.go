package reports

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
)

// ReadPeakRSS returns the peak resident set size of this process, in bytes:
// VmHWM from /proc/self/status. It is Linux only; elsewhere it returns an
// error, and the report's peakRSSBytes stays 0.
func ReadPeakRSS() (int64, error) { return readStatusKB("VmHWM") }

// ReadGCPercent returns the Go collector's target (GOGC) this process runs
// with now, or 0 if the runtime does not say.
func ReadGCPercent() int { return int(ReadRuntimeUint64("/gc/gogc:percent")) }

// ReadRuntimeUint64 reads one of the Go runtime's uint64 metrics
// (runtime/metrics) without stopping the world, as runtime.ReadMemStats
// would; 0 if the runtime has no such metric.
func ReadRuntimeUint64(name string) uint64 {
	sample := []metrics.Sample{{Name: name}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// ReadRSS returns the resident set size of this process now, in bytes:
// VmRSS from /proc/self/status (Linux only).
func ReadRSS() (int64, error) { return readStatusKB("VmRSS") }

func readStatusKB(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading %s (needs Linux /proc): %w", field, err)
	}
	defer f.Close()
	return parseStatusKB(f, field)
}

// parseStatusKB finds a "Field:\t  123456 kB" line of a /proc/<pid>/status
// file and returns its value in bytes.
func parseStatusKB(r io.Reader, field string) (int64, error) {
	sc := bufio.NewScanner(r)
	prefix := []byte(field + ":")
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), prefix)
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return 0, fmt.Errorf("reading %s: unexpected line %q", field, sc.Text())
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading %s: unexpected line %q: %w", field, sc.Text(), err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading %s: %w", field, err)
	}
	return 0, fmt.Errorf("reading %s: no such line in /proc/self/status", field)
}
